#!/usr/bin/env bash
# Cuts release V of every published module, one version for all: on a clean
# checkout whose CHANGELOG.md has a `## V` heading, it writes the release
# commit (HEAD with each published go.mod requiring its siblings at V, no
# replace, and their checksums in the go.sums), on no branch, tags each
# module at it (V, kubeadapter/V, ...), then checks the tags as the public
# module proxy will serve them (hack/release-check.sh -tags V). It pushes
# nothing: it prints the push command. If the check fails it deletes the
# tags it made.
#
#   hack/release.sh v0.2.0
set -euo pipefail
v=${1:?usage: hack/release.sh vX.Y.Z}
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${TMPDIR:-/tmp}/kubewire-release.$$
trap 'rm -f "$bin"' EXIT
(cd "$root/hack/release" && GOWORK=off GOFLAGS=-mod=readonly go build -buildvcs=false -o "$bin" .)
push=$("$bin" -C "$root" cut "$v")
if ! "$bin" -C "$root" check -tags "$v"; then
	tags=${push#git push origin }
	echo "release: the tags of $v fail the check; deleting them" >&2
	# shellcheck disable=SC2086 # one argument per tag
	git -C "$root" tag -d $tags >&2
	exit 1
fi
echo "release: $v is tagged and checked; publish it with:" >&2
echo "	$push" >&2
echo "release: then make the release commit an ancestor of main, keeping main's tree, so that later commits' pseudo-versions sort above $v:" >&2
echo "	git merge -s ours --no-ff -m \"Merge release $v\" $v && git push origin HEAD" >&2
