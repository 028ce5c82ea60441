#!/usr/bin/env bash
# Runs one phase of the suite and prints how long it took, under which Go
# release, so that the next regression of CI's time shows in its log. With
# KUBEWIRE_LEDGER set (make ci sets it), the line also goes into that file,
# which make ci prints at the end.
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
line="phase: $name on $(go env GOVERSION): $((SECONDS - start))s, $status"
echo "$line" >&2
if [[ -n ${KUBEWIRE_LEDGER:-} ]]; then
	echo "$line" >>"$KUBEWIRE_LEDGER"
fi
exit $rc
