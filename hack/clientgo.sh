#!/usr/bin/env bash
# Runs kubeadapter's whole suite on each client-go release given: its own
# tests (kubeadapter) and its tests against a real API server (the untagged
# module test/kubeadapter), each module on its own (GOWORK=off) as a user's
# build on that release sees it. "floor" is each go.mod as it is, which
# requires the oldest release kubeadapter supports; a version is a scratch
# copy of that go.mod with client-go, api and apimachinery set to it.
#
#   hack/clientgo.sh floor v0.35.10 v0.36.6
set -euo pipefail
: "${KUBEBUILDER_ASSETS:?the API server tests need it: run make clientgo, which builds the binaries and sets it}"
root=$(cd "$(dirname "$0")/.." && pwd)
export GOWORK=off
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
for v in "$@"; do
	for dir in kubeadapter test/kubeadapter; do
		cd "$root/$dir"
		floor=$(go list -m -f '{{.Version}}' k8s.io/client-go)
		modfile=go.mod
		if [[ $v != floor ]]; then
			modfile=$scratch/${dir//\//_}.$v.mod
			cp go.mod "$modfile"
			cp go.sum "${modfile%.mod}.sum"
			go get -modfile="$modfile" "k8s.io/client-go@$v" "k8s.io/api@$v" "k8s.io/apimachinery@$v"
			# go get records no go.sum line for a package that moved into a
			# module of its own (go-openapi/swag at v0.37.2); tidy does.
			go mod tidy -modfile="$modfile"
		fi
		got=$(go list -modfile="$modfile" -m -f '{{.Version}}' k8s.io/client-go)
		if [[ $got != "$v" && ($v != floor || $got != "$floor") ]]; then
			echo "clientgo: $dir: asked for client-go $v, the build selects $got" >&2
			exit 1
		fi
		echo "clientgo: $dir with k8s.io/client-go $got" >&2
		start=$SECONDS
		go test -modfile="$modfile" -race -count=1 ./...
		echo "clientgo: $dir on client-go $got passed in $((SECONDS - start))s" >&2
	done
done
