#!/usr/bin/env bash
# Builds the envtest binaries, kube-apiserver and etcd, from Go modules (the
# tools module in hack/envtest) into DIR, unless DIR already holds binaries
# built from the same inputs. Prints DIR.
#
#   hack/envtest.sh DIR VERSION
#
# The binaries are built with the Go in PATH (GOTOOLCHAIN=local), whatever
# GOTOOLCHAIN the caller runs the tests with, so `make test` and
# `make test-go1.27` share one build and one cache entry.
set -euo pipefail
export GOTOOLCHAIN=local
# A tools module of its own: never the repository's workspace.
export GOWORK=off
dir=$1 version=$2
cd "$(dirname "$0")/envtest"
major=${version%%.*} rest=${version#*.} minor=${rest%%.*}
ldflags="-X k8s.io/component-base/version.gitVersion=v$version -X k8s.io/component-base/version.gitMajor=$major -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
# The key covers what the binaries are built from and how (not this
# script's comments), and the toolchain that builds them.
buildflags="-buildvcs=false"
# It is kept in .recipe (earlier versions of this script wrote a key of
# their own to .inputs), so that checkouts with either version share the
# binaries without rebuilding them in turn.
key=$( { cat go.mod go.sum; echo "$buildflags $ldflags"; go version; } | sha256sum | cut -c1-32)
if [[ -x $dir/kube-apiserver && -x $dir/etcd && "$(cat "$dir/.recipe" 2>/dev/null)" == "$key" ]]; then
	exit 0
fi
mkdir -p "$dir"
echo "building kube-apiserver v$version and etcd into $dir (a few minutes the first time)" >&2
go build $buildflags -ldflags "$ldflags" -o "$dir/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver
go build $buildflags -o "$dir/etcd.tmp" go.etcd.io/etcd/server/v3
mv "$dir/kube-apiserver.tmp" "$dir/kube-apiserver"
mv "$dir/etcd.tmp" "$dir/etcd"
echo "$key" >"$dir/.recipe"
