#!/usr/bin/env bash
# What a user's module graph gets from each audience's import. Each check is
# a scratch module that requires this checkout's modules as a user's go.mod
# would, with a replace standing in for the published version (GOWORK=off):
#
#   timeout      imports only timeout: no k8s.io, sigs.k8s.io or Prometheus
#                module may enter its graph.
#   kubeadapter  imports kubeadapter beside client-go v0.34.0, the oldest
#                release it supports: no module of the graph the user had
#                with client-go alone (client-go, api, apimachinery, x/net,
#                logr, testify, ...) may come out at a higher version.
#   driver       imports the driver: its graph is listed.
#
# It prints, for each, the number of modules in the graph and its k8s.io,
# sigs.k8s.io and Prometheus modules.
set -euo pipefail
# KUBEWIRE_ROOT checks another checkout, such as an older commit.
root=${KUBEWIRE_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
export GOWORK=off GOFLAGS=-mod=mod
scratch=$(mktemp -d)
[[ -n ${KEEP:-} ]] || trap 'rm -rf "$scratch"' EXIT
kw=github.com/kubewire/kubewire
status=0

# consumer NAME "IMPORT..." [MODULE@VERSION...] builds the module and
# prints its graph to $scratch/NAME.graph.
consumer() {
	local name=$1 imports=$2 d=$scratch/$1
	shift 2
	mkdir -p "$d"
	printf 'module example.com/%s\n\ngo 1.26.0\n' "$name" >"$d/go.mod"
	for m in "" /kubeadapter /metrics /driver /internal/kubetest /internal/sandboxtest; do
		if [[ -f $root$m/go.mod ]]; then (cd "$d" && go mod edit -replace="$kw$m=$root$m"); fi
	done
	for r in "$@"; do
		(cd "$d" && go mod edit -require="$r")
	done
	{
		printf 'package main\n\nimport (\n'
		for i in $imports; do printf '\t_ "%s"\n' "$i"; done
		printf ')\n\nfunc main() {}\n'
	} >"$d/main.go"
	(cd "$d" && go mod tidy 2>"$d/tidy.log") || { cat "$d/tidy.log" >&2; exit 1; }
	(cd "$d" && go build ./... && go list -m all) >"$d.graph"
	local kube
	kube=$(grep -E '^(k8s\.io|sigs\.k8s\.io)/|prometheus' "$d.graph" | tr '\n' ' ' || true)
	echo "consumers: $name: $(wc -l <"$d.graph") modules; k8s.io, sigs.k8s.io and Prometheus: ${kube:-none}"
}

consumer timeout "$kw/timeout"
if grep -qE '^(k8s\.io|sigs\.k8s\.io)/|prometheus' "$scratch/timeout.graph"; then
	echo "consumers: FAIL: importing only timeout pulls Kubernetes or Prometheus modules into the graph" >&2
	status=1
fi

clientgo="k8s.io/client-go@v0.34.0 k8s.io/api@v0.34.0 k8s.io/apimachinery@v0.34.0"
# shellcheck disable=SC2086 # one argument per module
consumer clientgo "k8s.io/client-go/rest" $clientgo
# shellcheck disable=SC2086
consumer kubeadapter "$kw/kubeadapter k8s.io/client-go/rest" $clientgo
while read -r mod had _; do
	got=$(awk -v m="$mod" '$1 == m { print $2 }' "$scratch/kubeadapter.graph")
	if [[ -n $got && $got != "$had" && $(printf '%s\n%s\n' "$had" "$got" | sort -V | tail -1) == "$got" ]]; then
		echo "consumers: FAIL: kubeadapter raises the user's $mod $had to $got" >&2
		status=1
	fi
done < <(grep -v '=>' "$scratch/clientgo.graph" | tail -n +2)

consumer driver "$kw/driver"
exit $status
