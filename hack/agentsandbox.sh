#!/usr/bin/env bash
# Builds the agent-sandbox controller of the release pinned by the tools
# module in hack/agentsandbox (v0.4.6, v1alpha1 only) into DIR, and copies
# that release's Sandbox CRD from its module beside it, unless DIR already
# holds them from the same inputs. The driver tests run this controller as a
# process against envtest's API server.
#
#   hack/agentsandbox.sh DIR
set -euo pipefail
dir=$1
cd "$(dirname "$0")/agentsandbox"
# One toolchain for the build whatever GOTOOLCHAIN the caller runs under, so
# a run under another Go release reuses the binary: the Go in PATH, which
# must be 1.26.2 or later (v0.4.6's go.mod). The tools module's go.sum is
# complete; the build never rewrites it.
export GOTOOLCHAIN=local GOFLAGS=-mod=readonly
# A tools module of its own: never the repository's workspace.
export GOWORK=off
key=$( { cat go.mod go.sum ../agentsandbox.sh; go version; } | sha256sum | cut -c1-32)
if [[ -x $dir/agent-sandbox-controller && -f $dir/crds/agents.x-k8s.io_sandboxes.yaml && "$(cat "$dir/.inputs" 2>/dev/null)" == "$key" ]]; then
	exit 0
fi
mkdir -p "$dir/crds"
echo "building the agent-sandbox controller $(go list -m -f '{{.Version}}' sigs.k8s.io/agent-sandbox) into $dir" >&2
go build -buildvcs=false -o "$dir/agent-sandbox-controller.tmp" sigs.k8s.io/agent-sandbox/cmd/agent-sandbox-controller
mod=$(go list -m -f '{{.Dir}}' sigs.k8s.io/agent-sandbox)
cp "$mod/k8s/crds/agents.x-k8s.io_sandboxes.yaml" "$dir/crds/"
chmod u+w "$dir/crds/agents.x-k8s.io_sandboxes.yaml"
mv "$dir/agent-sandbox-controller.tmp" "$dir/agent-sandbox-controller"
echo "$key" >"$dir/.inputs"
