#!/usr/bin/env bash
# Cuts release V of every published module, one version for all (see
# RELEASING.md): on a clean checkout of a branch whose CHANGELOG.md has a
# `## V - YYYY-MM-DD` heading, one commit requiring the siblings at V, checked as users
# will get it (release-check's checks on git's own zips of the commit), then
# in one git transaction a tag per module on it and the branch moved to it,
# or nothing at all. It pushes nothing: it prints the push command.
#
#   hack/release.sh v0.2.0
set -euo pipefail
v=${1:?usage: hack/release.sh vX.Y.Z}
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${TMPDIR:-/tmp}/kubewire-release.$$
trap 'rm -f "$bin"' EXIT
(cd "$root/hack/release" && GOWORK=off GOFLAGS=-mod=readonly go build -buildvcs=false -o "$bin" .)
cd "$root" && "$bin" cut "$v"
