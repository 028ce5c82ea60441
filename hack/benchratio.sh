#!/usr/bin/env bash
# Runs a baseline benchmark and one or more candidates, interleaved N times
# so that drift on a shared machine hits all alike, and prints benchstat's
# comparison of each candidate with the baseline.
#
#   hack/benchratio.sh PKG BASELINE CANDIDATE... [-n N]
#   hack/benchratio.sh ./bench Bare Stack
#   hack/benchratio.sh ./bench Bare Kubewire RetryableHTTP OtelHTTP -n 10
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
pattern="^Benchmark($(IFS='|'; echo "${names[*]}"))\$"
for ((i = 0; i < n; i++)); do
	go test -run '^$' -bench "$pattern" -benchmem -count 1 "$pkg" >>"$out/all.txt"
done
grep -E '^(goos|goarch|pkg|cpu):' "$out/all.txt" | sort -u >"$out/hdr"
files=()
for name in "${names[@]}"; do
	# Drop the names so that benchstat lines up baseline and candidates.
	{ cat "$out/hdr"; grep -E "^Benchmark$name[/-]" "$out/all.txt" | sed -E "s/^Benchmark$name([/-])/Benchmark\1/"; } >"$out/$name"
	files+=("$name")
done
cd "$out" && "$benchstat" "${files[@]}"
