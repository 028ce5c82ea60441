#!/usr/bin/env bash
# Builds the envtest binaries, kube-apiserver and etcd, from Go modules (the
# tools module hack, hack/envtest pinning them) into DIR, unless DIR already holds binaries
# built from the same inputs.
#
#   hack/envtest.sh DIR VERSION
#
# The binaries are built with the Go in PATH (GOTOOLCHAIN=local), whatever
# GOTOOLCHAIN the caller runs the tests with, so the suite on every Go
# release shares one build and one cache entry.
#
# They are built lean, as a test fixture needs them: one go build for both,
# so the two links run in parallel; no DWARF from the compiler
# (-dwarf=false, 8% of its time) nor the linker, and no symbol table
# (-s -w), which a test never reads; static, as Kubernetes' releases are
# (CGO_ENABLED=0); -trimpath, so the build does not depend on where the
# module cache is.
set -euo pipefail
export GOTOOLCHAIN=local
# A tools module of its own: never the repository's workspace; and none
# of the caller's build flags (-race, tags), which the key does not cover.
export GOWORK=off GOFLAGS=
dir=$1 version=$2
cd "$(dirname "$0")/envtest"
major=${version%%.*} rest=${version#*.} minor=${rest%%.*}
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=v$version -X k8s.io/component-base/version.gitMajor=$major -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
buildflags="-buildvcs=false -trimpath -gcflags=all=-dwarf=false"
export CGO_ENABLED=0
# The key covers what the binaries are built from and how (not this
# script's comments), and the toolchain that builds them.
key=$( { cat ../go.mod ../go.sum; echo "$buildflags $ldflags CGO_ENABLED=$CGO_ENABLED"; go version; } | sha256sum | cut -c1-32)
if [[ -x $dir/kube-apiserver && -x $dir/etcd && "$(cat "$dir/.recipe" 2>/dev/null)" == "$key" ]]; then
	exit 0
fi
mkdir -p "$dir"
echo "building kube-apiserver v$version and etcd into $dir (a few minutes the first time)" >&2
tmp=$(mktemp -d "$dir/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# go build names a binary after its package path's last element that is
# not a major version: kube-apiserver, and server for etcd/server/v3.
go build $buildflags -ldflags "$ldflags" -o "$tmp/" k8s.io/kubernetes/cmd/kube-apiserver go.etcd.io/etcd/server/v3
mv "$tmp/kube-apiserver" "$dir/kube-apiserver"
mv "$tmp/server" "$dir/etcd"
echo "$key" >"$dir/.recipe"
