GO ?= go

# The envtest binaries (kube-apiserver and etcd) are built from Go modules by
# the tools module in hack/envtest and cached outside the repository, so a
# second run takes seconds.
ENVTEST_K8S_VERSION := 1.37.2
ENVTEST_DIR ?= $(abspath $(shell $(GO) env GOCACHE)/../kubewire-envtest/$(ENVTEST_K8S_VERSION))
TEST_ENV = KUBEBUILDER_ASSETS=$(ENVTEST_DIR)

# The newest Go release the suite also runs on; `make test` uses the Go in
# PATH. Go fetches the toolchain from the module proxy the first time.
GO_NEXT ?= go1.27.3

# The repository's modules, as go.work lists them, and their packages.
# `./...` stops at a nested module, so every target names them all.
# The workspace is always this go.work, whatever GOWORK the caller has: with
# it off, `go list -m` would name only the root, and the targets would
# silently cover one module.
export GOWORK := $(CURDIR)/go.work
MODULES := $(shell $(GO) list -m -f '{{.Dir}}' | sed 's|^$(CURDIR)|.|')
PKGS := $(addsuffix /...,$(MODULES))

# The client-go releases kubeadapter supports besides the one in its go.mod
# (the oldest, v0.34.0): each runs kubeadapter's whole suite, API server
# tests included, on its own (hack/matrix.sh).
CLIENTGO_RELEASES ?= v0.35.10 v0.36.6
# The newest supported release is the one the workspace run selects
# (examples/gateway requires it), so the matrix does not run it a second
# time; `make clientgo` fails when the workspace moves off it, so that no
# release is left out unnoticed.
CLIENTGO_NEWEST := v0.37.2

# The agent-sandbox releases the driver supports besides the one in its
# go.mod (v0.5.6, the oldest): the driver's suites run on each, API server
# tests with that release's controller included, and not in the workspace
# run, which would repeat them (hack/matrix.sh).
SANDBOX_RELEASES ?= v1.0.3
SANDBOX_FLOOR ?= floor
SANDBOX_MODULES := ./driver ./test/driver
WORKSPACE_PKGS := $(addsuffix /...,$(filter-out $(SANDBOX_MODULES),$(MODULES)))

# The timing-sensitive packages `make stress` runs under load.
STRESS_PKGS ?= ./transport/... ./timeout ./pooltrace ./retry ./stack ./kubeadapter ./metrics ./tracing/... ./test/tracing/... ./driver/... ./internal/... ./cmd/kubewire/... ./test/kubetest/... ./test/kubeadapter/... ./test/driver/... ./test/probe/...
STRESS_COUNT ?= 20
# go test's default of 10 minutes per test binary is too short for 20 runs
# of an API-server suite under load: kubeadapter's and the reconciler's
# ran past it.
STRESS_TIMEOUT ?= 2h

.PHONY: test test-go1.27 ci tidy vet gofmt envtest stress repro bench fmt soak clientgo sandboxes otel-floor release-check

# Checks of the go.mod files and of users' module graphs, which do not
# depend on the Go release: the Go 1.27 run skips them.
MODULE_CHECKS ?= tidy release-check

# Each phase of `make test` prints how long it took (hack/phase.sh).
PHASE = hack/phase.sh

# Every go test of `make test` runs go vet's whole suite (-vet=all; go
# test's default is a subset) on the packages it builds, from the same
# -race compile: a separate `go vet` compiles the whole graph a second
# time without -race, which cost 9 of a cold Go 1.27 run's 21 minutes.
GOTEST = $(GO) test -race -vet=all -count=1
export GOTEST

test: gofmt $(MODULE_CHECKS) envtest
	$(TEST_ENV) $(PHASE) workspace $(GOTEST) $(WORKSPACE_PKGS)
	$(MAKE) otel-floor
	$(MAKE) clientgo
	$(MAKE) sandboxes

# The same suite on the next Go release. The envtest binaries are shared:
# hack/envtest.sh always builds them with the Go in PATH. The client-go
# matrix and the module checks run once, with the Go in PATH; the driver's
# suites run on the newest agent-sandbox release only.
test-go1.27:
	GOTOOLCHAIN=$(GO_NEXT) $(MAKE) test CLIENTGO_RELEASES= CLIENTGO_FLOOR= MODULE_CHECKS= SANDBOX_FLOOR=

ci: test test-go1.27

# Each go.mod on its own, as a user's `go get` sees it.
tidy:
	@$(PHASE) tidy bash -c 'set -e; for m in $(MODULES); do (cd $$m && GOWORK=off $(GO) mod tidy -diff) || { echo "$$m: go.mod not tidy (cd $$m && GOWORK=off go mod tidy)"; exit 1; }; done'

# kubeadapter's suite at its go.mod's client-go (the oldest it supports)
# and at each of CLIENTGO_RELEASES, without the workspace.
CLIENTGO_FLOOR ?= floor
clientgo: envtest
	@test "$$($(GO) list -m -f '{{.Version}}' k8s.io/client-go)" = $(CLIENTGO_NEWEST) || { echo "clientgo: the workspace selects client-go $$($(GO) list -m -f '{{.Version}}' k8s.io/client-go), not $(CLIENTGO_NEWEST): set CLIENTGO_NEWEST and the matrix to the releases kubeadapter supports"; exit 1; }
	$(TEST_ENV) $(PHASE) clientgo hack/matrix.sh clientgo "k8s.io/client-go k8s.io/api k8s.io/apimachinery" "kubeadapter test/kubeadapter" $(CLIENTGO_FLOOR) $(CLIENTGO_RELEASES)

# The driver's suites at its go.mod's agent-sandbox (the oldest it
# supports) and at each of SANDBOX_RELEASES, without the workspace.
sandboxes: envtest
	$(TEST_ENV) $(PHASE) sandboxes hack/matrix.sh sandboxes sigs.k8s.io/agent-sandbox "driver test/driver" $(SANDBOX_FLOOR) $(SANDBOX_RELEASES)

# tracing's suite at the OpenTelemetry release its go.mod states (the
# oldest it supports), without the workspace, whose other modules raise it.
otel-floor:
	cd tracing && GOWORK=off ../$(PHASE) otel-floor $(GOTEST) ./...

# The release rehearsal: every published module at a candidate version in a
# file:// module proxy, as hack/release.sh would tag it, and users' builds of
# it from scratch modules (RELEASING.md).
release-check:
	$(PHASE) release-check hack/release-check.sh

# The flakiness gate: every timing-sensitive test STRESS_COUNT times with
# -race while a busy loop per CPU competes for the machine. It must pass
# with 0 failures.
stress: envtest
	$(TEST_ENV) hack/stress.sh -count=$(STRESS_COUNT) -timeout=$(STRESS_TIMEOUT) $(STRESS_PKGS)

gofmt:
	@test -z "$$(gofmt -l .)" || { echo "gofmt needed:"; gofmt -l .; exit 1; }

# go vet alone, for a quick look; make test vets as it tests.
vet: gofmt
	$(GO) vet $(PKGS)

# Builds only when the binaries are missing or their inputs changed.
envtest:
	@$(PHASE) envtest hack/envtest.sh $(ENVTEST_DIR) $(ENVTEST_K8S_VERSION)

repro:
	$(GO) run ./examples/repro

# Baselines and candidates run interleaved (10 times unless -n says) and
# benchstat compares them; ratios come from the same run. About 5 minutes on
# 2 cores.
bench: envtest
	hack/benchratio.sh ./bench Bare Stack Kubewire RetryableHTTP OtelHTTP
	hack/benchratio.sh ./bench Kubewire KubewireMetrics
	hack/benchratio.sh ./bench Kubewire KubewireTracing KubewireOtelHTTP
	hack/benchratio.sh ./bench OverheadBare OverheadTimeout OverheadPooltrace OverheadStack -n 8
	hack/benchratio.sh ./bench RetryBaseline Retry
	hack/benchratio.sh ./bench RetryPutBaseline RetryPut
	KUBEBUILDER_ASSETS=$(ENVTEST_DIR) hack/benchratio.sh ./test/kubeadapter ClientGoBare ClientGoApplied
	hack/benchratio.sh ./bench RecoveryClientGo RecoveryKubewire -n 5
	$(GO) test -run '^$$' -bench IdleEdge -benchtime 3x ./bench
	$(GO) test -run '^$$' -bench Pass -benchtime 5x -benchmem ./driver/reconciler
	$(TEST_ENV) $(GO) test -run '^$$' -bench 'RunIdle|FenceChange|Namespaces' -benchtime 1x -timeout 60m ./test/driver/reconciler

fmt:
	gofmt -w .

# The soak: the gateway under mixed connection faults and a kube-apiserver
# restart, judged against the API server's audit log (examples/gateway/internal/soak). `make
# test` runs it for 30 seconds with a fixed seed (TestSoak); this runs it
# for SOAK_DURATION with SOAK_SEED and every fault, and keeps the history,
# the audit log and the report in SOAK_OUT.
SOAK_DURATION ?= 10m
SOAK_SEED ?= $(shell date +%s)
SOAK_OUT ?= $(abspath $(shell $(GO) env GOCACHE)/../kubewire-soak)/$(SOAK_SEED)
SOAK_FLAGS ?=

soak: envtest
	$(TEST_ENV) $(GO) test -count=1 -timeout 0 -run '^TestSoak$$' -v ./examples/gateway \
		-args -soak.duration=$(SOAK_DURATION) -soak.seed=$(SOAK_SEED) -soak.out=$(SOAK_OUT) $(SOAK_FLAGS)
