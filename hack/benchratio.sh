#!/usr/bin/env bash
# Runs a baseline benchmark and one or more candidates N times each, every
# round in a new random order and each benchmark in a process of its own,
# so that drift and position effects on a shared machine hit all alike; then
# prints benchstat's comparison of each candidate with the baseline.
#
#   hack/benchratio.sh PKG BASELINE CANDIDATE... [-n N]
#   hack/benchratio.sh ./test/bench Bare Stack
#   hack/benchratio.sh ./test/bench Bare Kubewire RetryableHTTP OtelHTTP -n 10
set -euo pipefail
pkg=$1
shift
n=10
names=()
while (($#)); do
	case $1 in
	-n) n=$2; shift 2 ;;
	*) names+=("$1"); shift ;;
	esac
done
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
benchstat=$(go env GOPATH)/bin/benchstat
if [[ ! -x $benchstat ]]; then
	GOFLAGS= go install golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da
fi
go test -c -o "$out/bench.test" "$pkg"
dir=$(go list -f '{{.Dir}}' "$pkg")
for ((i = 0; i < n; i++)); do
	for name in $(printf '%s\n' "${names[@]}" | shuf); do
		(cd "$dir" && "$out/bench.test" -test.run '^$' -test.bench "^Benchmark$name\$" -test.benchmem -test.count 1) >>"$out/$name.raw"
	done
done
files=()
for name in "${names[@]}"; do
	# Drop the names so that benchstat lines up baseline and candidates.
	{ grep -E '^(goos|goarch|pkg|cpu):' "$out/$name.raw" | sort -u; grep -E "^Benchmark$name[/-]" "$out/$name.raw" | sed -E "s/^Benchmark$name([/-])/Benchmark\\1/"; } >"$out/$name"
	files+=("$name")
done
cd "$out" && "$benchstat" "${files[@]}"
