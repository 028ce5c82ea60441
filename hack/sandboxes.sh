#!/usr/bin/env bash
# Runs the driver's suites on each agent-sandbox release given: the
# driver's own tests (driver, on client-go's fake clientsets) and its tests
# against a real API server with that release's CRD and controller in
# process (the untagged module test/driver), each module on its own
# (GOWORK=off) as a user's build on that release sees it. "floor" is each
# go.mod as it is, which requires the oldest release the driver supports; a
# version is a scratch copy of that go.mod with agent-sandbox set to it.
# The scratch go.mod is given through GOFLAGS, so that the `go list -m` the
# rig runs to find the release's CRD sees the same release.
#
#   hack/sandboxes.sh floor v1.0.3
set -euo pipefail
: "${KUBEBUILDER_ASSETS:?the API server tests need it: run make sandboxes, which builds the binaries and sets it}"
root=$(cd "$(dirname "$0")/.." && pwd)
export GOWORK=off
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
for v in "$@"; do
	for dir in driver test/driver; do
		cd "$root/$dir"
		floor=$(go list -m -f '{{.Version}}' sigs.k8s.io/agent-sandbox)
		modfile=$PWD/go.mod
		if [[ $v != floor ]]; then
			modfile=$scratch/${dir//\//_}.$v.mod
			cp go.mod "$modfile"
			cp go.sum "${modfile%.mod}.sum"
			go get -modfile="$modfile" "sigs.k8s.io/agent-sandbox@$v"
			go mod tidy -modfile="$modfile"
		fi
		got=$(GOFLAGS=-modfile="$modfile" go list -m -f '{{.Version}}' sigs.k8s.io/agent-sandbox)
		if [[ $got != "$v" && ($v != floor || $got != "$floor") ]]; then
			echo "sandboxes: $dir: asked for agent-sandbox $v, the build selects $got" >&2
			exit 1
		fi
		echo "sandboxes: $dir with sigs.k8s.io/agent-sandbox $got, $(GOFLAGS=-modfile="$modfile" go list -m -f '{{.Path}} {{.Version}}' k8s.io/client-go sigs.k8s.io/controller-runtime | tr '\n' ' ')" >&2
		start=$SECONDS
		GOFLAGS=-modfile="$modfile" go test -race -count=1 ./...
		echo "sandboxes: $dir on agent-sandbox $got passed in $((SECONDS - start))s" >&2
	done
done
