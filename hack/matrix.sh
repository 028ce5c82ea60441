#!/usr/bin/env bash
# Runs the suites of DIRS on releases of a dependency they support, each
# module on its own (GOWORK=off) as a user's build on that release sees
# it: make clientgo (kubeadapter on client-go releases) and make sandboxes
# (the driver on agent-sandbox releases). "floor" is each go.mod as it is,
# which requires the oldest release supported; a version is a scratch copy
# of that go.mod with MODULES set to it (go get, then tidy, which records
# what go get leaves out of go.sum for a package that moved into a module
# of its own). The scratch go.mod is given through GOFLAGS, so that a `go
# list -m` a test runs (the agent-sandbox rig finds its release's CRD so)
# sees the same release. Each module at each release is one phase
# (hack/phase.sh), named by the versions its build selects.
#
#   hack/matrix.sh NAME "MODULE..." "DIR..." floor|VERSION...
#   hack/matrix.sh sandboxes "sigs.k8s.io/agent-sandbox" "driver test/driver" floor
set -euo pipefail
: "${KUBEBUILDER_ASSETS:?the API server tests need it: run make $1, which builds the binaries and sets it}"
name=$1
read -r -a modules <<<"$2"
read -r -a dirs <<<"$3"
shift 3
root=$(cd "$(dirname "$0")/.." && pwd)
export GOWORK=off
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
for v in "$@"; do
	for dir in "${dirs[@]}"; do
		cd "$root/$dir"
		floor=$(go list -m -f '{{.Version}}' "${modules[0]}")
		# DIR may be a package directory of a module above it.
		modfile=$(go env GOMOD)
		if [[ $v != floor ]]; then
			modfile=$scratch/${dir//\//_}.$v.mod
			cp "$(go env GOMOD)" "$modfile"
			cp "$(dirname "$(go env GOMOD)")/go.sum" "${modfile%.mod}.sum"
			go get -modfile="$modfile" "${modules[@]/%/@$v}"
			go mod tidy -modfile="$modfile"
		fi
		export GOFLAGS=-modfile=$modfile
		got=$(go list -m -f '{{.Version}}' "${modules[0]}")
		if [[ $got != "$v" && ($v != floor || $got != "$floor") ]]; then
			echo "$name: $dir: asked for ${modules[0]} $v, the build selects $got" >&2
			exit 1
		fi
		versions=$(go list -m -e -f '{{if not .Error}}{{.Path}} {{.Version}}{{end}}' "${modules[@]}" k8s.io/client-go sigs.k8s.io/controller-runtime | sort -u | sed '/^$/d' | paste -sd, -)
		# shellcheck disable=SC2086 # GOTEST is a command and its flags
		"$root/hack/phase.sh" "$name, $dir at $versions" ${GOTEST:?the go test command, which the Makefile sets} ./...
		unset GOFLAGS
	done
done
