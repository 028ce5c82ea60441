#!/usr/bin/env bash
# Runs a pair of benchmarks, baseline and candidate, interleaved N times so
# that drift on a shared machine hits both alike, and prints benchstat's
# ratio of candidate to baseline.
#
#   hack/benchratio.sh PKG BASELINE CANDIDATE [N]
#   hack/benchratio.sh ./bench Bare Stack 10
set -euo pipefail
pkg=$1 base=$2 cand=$3 n=${4:-10}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
benchstat=$(go env GOPATH)/bin/benchstat
if [[ ! -x $benchstat ]]; then
	GOFLAGS= go install golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da
fi
for ((i = 0; i < n; i++)); do
	go test -run '^$' -bench "^Benchmark($base|$cand)\$" -benchmem -count 1 "$pkg" >>"$out/all.txt"
done
grep -E '^(goos|goarch|pkg|cpu):' "$out/all.txt" | sort -u >"$out/hdr"
# Drop the names so that benchstat lines up baseline and candidate.
{ cat "$out/hdr"; grep -E "^Benchmark$base[/-]" "$out/all.txt" | sed -E "s/^Benchmark$base([/-])/Benchmark\1/"; } >"$out/$base"
{ cat "$out/hdr"; grep -E "^Benchmark$cand[/-]" "$out/all.txt" | sed -E "s/^Benchmark$cand([/-])/Benchmark\1/"; } >"$out/$cand"
cd "$out" && "$benchstat" "$base" "$cand"
