#!/usr/bin/env bash
# Runs `go test -race` on the given packages while one busy loop per CPU
# keeps the machine loaded, so that tests which only pass on an idle machine
# fail here instead of in CI. The load stops when the tests end, and after
# STRESS_LOAD_SECONDS at most (two hours, make stress's test timeout).
#
#   hack/stress.sh [go test flags] PKG...
#   hack/stress.sh -count=20 ./transport ./retry
set -euo pipefail
go=${GO:-go}
load=()
stop() {
	for pid in "${load[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
	wait "${load[@]}" 2>/dev/null || true
}
trap stop EXIT
for _ in $(seq "$(nproc)"); do
	timeout "${STRESS_LOAD_SECONDS:-7200}" sh -c 'while :; do :; done' &
	load+=($!)
done
echo "load: ${#load[@]} busy loops; go test -race $*" >&2
start=$(date +%s)
status=0
"$go" test -race "$@" || status=$?
echo "stress: exit $status after $(($(date +%s) - start))s" >&2
exit $status
