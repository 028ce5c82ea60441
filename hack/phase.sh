#!/usr/bin/env bash
# Runs one phase of `make test` and prints how long it took, under which
# Go release, so that the next regression of CI's time shows in its log.
#
#   hack/phase.sh NAME COMMAND [ARG...]
set -u
name=$1
shift
start=$SECONDS
"$@"
rc=$?
status=ok
[[ $rc -eq 0 ]] || status="failed ($rc)"
echo "phase: $name on $(go env GOVERSION): $((SECONDS - start))s, $status" >&2
exit $rc
