#!/usr/bin/env bash
# The release rehearsal, `make release-check`: every published module (the
# list is hack/release/modules.txt) at a candidate version per checkout (one
# run at a time), built from the working tree as hack/release.sh would tag it (uncommitted
# changes included), in a file:// module proxy; then users' scratch modules,
# outside the repository with no replace and no workspace, go get it:
#
#   t  each published go.mod and go.sum is what go mod tidy makes of it
#   a  the root, importing timeout: no k8s.io, sigs.k8s.io, Prometheus or OpenTelemetry module
#   b  kubeadapter beside client-go v0.34.0: builds, raises no module
#   c  the driver: every module at the version its go.mod states, and
#      beside agent-sandbox v1.0.3 (agentSandboxNewest in
#      hack/release/check.go); its packages and tests build in both graphs
#      (make sandboxes runs the tests at the floor's versions, the workspace
#      run beside v1.0.3, with newer patches of client-go)
#   d  go install .../cmd/kubewire@candidate, and `kubewire probe -h`
#   e  every published module in one module: all their packages build
#
# It fails on a go.mod in neither list of modules.txt, a replace in a
# published go.mod other than of a published sibling by its directory, a
# published module requiring an unpublished one of this repository, and an
# import of another module's internal package, test files' included.
#
#   hack/release-check.sh [-only tabcde]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root/hack/release"
# The tools module hack, never the repository's workspace; its go.sum
# is complete.
export GOWORK=off
# The tool's own tests first: go.work does not list this module, so make
# test's workspace run does not reach it. TestChangelog is make
# changelog's, which make test runs: not twice.
GOFLAGS=-mod=readonly go vet ./...
GOFLAGS=-mod=readonly go test -count=1 -skip '^TestChangelog$' ./...
GOFLAGS=-mod=readonly go build -buildvcs=false -o "${TMPDIR:-/tmp}/kubewire-release.$$" .
trap 'rm -f "${TMPDIR:-/tmp}/kubewire-release.$$"' EXIT
cd "$root" && "${TMPDIR:-/tmp}/kubewire-release.$$" check "$@"
