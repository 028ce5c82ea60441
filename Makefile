GO ?= go

# The envtest binaries (kube-apiserver and etcd) are built from Go modules
# the tools module hack pins (hack/envtest) and cached outside the
# repository, so a second run takes seconds.
ENVTEST_K8S_VERSION := 1.37.2
ENVTEST_DIR ?= $(abspath $(shell $(GO) env GOCACHE)/../kubewire-envtest/$(ENVTEST_K8S_VERSION))
TEST_ENV = KUBEBUILDER_ASSETS=$(ENVTEST_DIR)

# The Go releases `make ci` runs on: each supported release's newest patch
# (Go's own oldstable and stable), one variable each, which Go fetches from
# the module proxy the first time. `make test` runs on the Go in PATH.
GO_OLDSTABLE ?= go1.26.11
GO_STABLE ?= go1.27.4

# The repository's modules, as go.work lists them, and their packages.
# `./...` stops at a nested module, so every target names them all.
# The workspace is always this go.work, whatever GOWORK the caller has: with
# it off, `go list -m` would name only the root, and the targets would
# silently cover one module.
export GOWORK := $(CURDIR)/go.work
MODULES := $(shell $(GO) list -m -f '{{.Dir}}' | sed 's|^$(CURDIR)|.|')
ifeq ($(strip $(MODULES)),)
$(error go list -m named no module of go.work; every target would cover nothing)
endif
PKGS := $(addsuffix /...,$(MODULES))

# The dependency versions the workspace run selects, which name its leg in
# the ledger: the newest release of each that the modules support.
WORKSPACE_DEPS = k8s.io/client-go sigs.k8s.io/controller-runtime sigs.k8s.io/agent-sandbox go.opentelemetry.io/otel

# The matrix legs of `make ci`: each module on its own (GOWORK=off), as a
# user's build sees it, at the releases of a dependency it supports that
# the workspace run does not select; "floor" is the go.mod as it is, which
# requires the oldest (hack/matrix.sh). The newest release of each is the
# workspace's, so no leg runs it a second time; `make clientgo` and `make
# sandboxes` fail when the workspace moves off it, so that no release is
# left out unnoticed.
#
# kubeadapter's suite, API server tests included, at client-go v0.34.0
# (its go.mod), v0.35.10 and v0.36.6.
CLIENTGO_RELEASES ?= floor v0.35.10 v0.36.6
CLIENTGO_NEWEST := v0.37.2
# The driver's suites, API server tests with that release's controller
# included, at agent-sandbox v0.5.6 (its go.mod). The workspace run has
# run them at v1.0.3 (with client-go v0.37.2); make release-check builds
# the driver and its tests in a user's module beside v1.0.3, whose graph
# differs from the workspace's in patch releases only (client-go v0.37.0,
# controller-runtime v0.25.0), without running them.
SANDBOX_RELEASES ?= floor
SANDBOX_NEWEST := v1.0.3
SANDBOX_MODULES := driver test/driver

# The timing-sensitive packages `make stress` runs under load.
STRESS_PKGS ?= ./examples/repro ./transport/... ./timeout ./pooltrace ./retry ./stack ./kubeadapter ./metrics ./tracing/... ./driver/... ./internal/... ./cmd/kubewire/... ./test/kubetest/... ./test/kubeadapter/... ./test/tracing/... ./test/driver/... ./test/probe/...
STRESS_COUNT ?= 20
# go test's default of 10 minutes per test binary is too short for 20 runs
# of an API-server suite under load: kubeadapter's and the reconciler's
# ran past it.
STRESS_TIMEOUT ?= 2h

.PHONY: help test test-go1.27 ci workspace matrix tidy docs changelog vet gofmt envtest stress repro bench fmt soak clientgo sandboxes otel-floor release-check

# Each phase prints how long it took, under which Go release; under `make
# ci` it also goes into the ledger that make ci prints at the end
# (hack/phase.sh).
PHASE = hack/phase.sh

# Every go test runs go vet's whole suite (-vet=all; go test's default is
# a subset) on the packages it builds, from the same compile: a separate
# `go vet` compiles the whole graph a second time without -race, which cost
# 9 of a cold Go 1.27 run's 21 minutes.
#
# -p, two slots per CPU: go test shares its -p slots (default: one per
# CPU) between compiles, links and test runs, and the suites that dominate
# its time mostly wait on an API server, a timer or a peer, holding a slot
# a compile or another suite could use (a warm run used one core of two).
# On 2 cores, 4 slots took a warm run from 241s to 149s.
TEST_P ?= $(shell echo $$(( $$(nproc) * 2 )))
GOTEST = $(GO) test -race -vet=all -count=1 -p $(TEST_P)


# What a contributor runs before every commit: formatting, each go.mod
# tidy on its own, the docs' citations, CHANGELOG.md's form, every copy of
# a shared helper as its template makes it, and every module's tests with
# -race, against a real kube-apiserver and etcd (built the first time), on
# the Go in PATH, at the newest release of each dependency.
test: gofmt tidy docs changelog generated workspace ## before every commit: gofmt, tidy, the docs' citations, CHANGELOG.md's form, shared helpers' drift, every module's tests with -race, a real kube-apiserver included

# make test on Go 1.27's newest patch (GO_STABLE), as make ci runs it.
test-go1.27: ## make test on Go 1.27's newest patch (GO_STABLE)
	GOTOOLCHAIN=$(GO_STABLE) $(MAKE) test

# What CI runs: make test on the oldest supported Go release, every matrix
# leg and the release rehearsal there, then make test on the newest, with
# tracing at its OpenTelemetry floor (13s) too. Every module's tests run
# once per Go release at the workspace's versions, and once per other
# supported release of a dependency; at the end, pass or fail, the ledger
# says which leg ran which modules at which versions, and what each cost.
ci: ## what CI runs: make test on Go 1.26 and 1.27, every matrix leg, the release rehearsal, then a ledger
	@ledger=$$(mktemp -t kubewire-ci.XXXXXX); export KUBEWIRE_LEDGER=$$ledger; \
	trap 'status=$$?; echo "make ci: what ran, at which versions, and what it cost:"; cat "$$ledger"; rm -f "$$ledger"; \
		if [ $$status -eq 0 ]; then echo "make ci: passed"; else echo "make ci: FAILED (exit $$status) after the phases above"; fi; exit $$status' EXIT; \
	set -e; \
	GOTOOLCHAIN=$(GO_OLDSTABLE) $(MAKE) test; \
	GOTOOLCHAIN=$(GO_OLDSTABLE) $(MAKE) matrix; \
	GOTOOLCHAIN=$(GO_OLDSTABLE) $(MAKE) release-check; \
	GOTOOLCHAIN=$(GO_STABLE) $(MAKE) test; \
	GOTOOLCHAIN=$(GO_STABLE) $(MAKE) otel-floor

# Every module's tests in the workspace, the envtest binaries built if
# missing.
workspace: envtest ## every module's tests in the workspace (make test without its checks)
	$(TEST_ENV) $(PHASE) "workspace, $(words $(MODULES)) modules, $$($(GO) list -m -f '{{.Path}} {{.Version}}' $(WORKSPACE_DEPS) | paste -sd, -)" $(GOTEST) $(PKGS)

# The matrix legs keep -race, as the workspace run does. Without it they
# would be no cheaper: on a cold 2-core machine the client-go legs took
# 665s without -race and 669s with it, the agent-sandbox floor's driver
# suite 246s without and 182s with, tracing's floor 54s without and 13s
# with. What they cost is compiling each dependency release, and with
# -race they reuse every package the workspace run compiled at the same
# versions (x/net, protobuf, the standard library). And a race on a path
# only one release takes (kubeadapter checks what each client-go offers,
# the driver reads what each agent-sandbox writes) is found nowhere else.
matrix: otel-floor clientgo sandboxes ## every matrix leg: clientgo, sandboxes and otel-floor

# The repository's prose cites what exists: the Go samples of README.md
# and docs/ are Example bodies, and the identifiers, test names, paths and
# links the docs name exist (hack/readme). The tools module hack is outside
# go.work, so the workspace run does not reach its tests.
docs: ## README.md, CONTRIBUTING.md and docs/ cite what exists; Go samples are Examples
	@$(PHASE) docs bash -c 'cd hack && GOWORK=off GOFLAGS=-mod=readonly $(GO) test -count=1 ./readme/'

# CHANGELOG.md in its form, a section per published module
# (hack/release/changelog.go), from the tools module hack like make docs;
# make release-check runs the release tool's other tests.
changelog: ## CHANGELOG.md in its form: a section per published module
	@$(PHASE) changelog bash -c 'cd hack/release && GOWORK=off GOFLAGS=-mod=readonly $(GO) test -count=1 -run "^TestChangelog" .'

# Each go.mod on its own, as a user's `go get` sees it, and the tools
# module hack, which is outside go.work.
tidy: ## check that each go.mod is tidy on its own (GOWORK=off)
	@$(PHASE) tidy bash -c 'set -e; for m in $(MODULES) ./hack; do (cd $$m && GOWORK=off $(GO) mod tidy -diff) || { echo "$$m: go.mod not tidy (cd $$m && GOWORK=off go mod tidy)"; exit 1; }; done'

clientgo: envtest ## kubeadapter's suite at each older client-go release (CLIENTGO_RELEASES)
	@test "$$($(GO) list -m -f '{{.Version}}' k8s.io/client-go)" = $(CLIENTGO_NEWEST) || { echo "clientgo: the workspace selects client-go $$($(GO) list -m -f '{{.Version}}' k8s.io/client-go), not $(CLIENTGO_NEWEST): set CLIENTGO_NEWEST and the matrix to the releases kubeadapter supports"; exit 1; }
	$(TEST_ENV) GOTEST="$(GOTEST)" hack/matrix.sh clientgo "k8s.io/client-go k8s.io/api k8s.io/apimachinery" "kubeadapter test/kubeadapter" $(CLIENTGO_RELEASES)

sandboxes: envtest ## the driver's suites at agent-sandbox's oldest supported release (SANDBOX_RELEASES)
	@test "$$($(GO) list -m -f '{{.Version}}' sigs.k8s.io/agent-sandbox)" = $(SANDBOX_NEWEST) || { echo "sandboxes: the workspace selects agent-sandbox $$($(GO) list -m -f '{{.Version}}' sigs.k8s.io/agent-sandbox), not $(SANDBOX_NEWEST): set SANDBOX_NEWEST, agentSandboxNewest in hack/release/check.go and the matrix to the releases the driver supports"; exit 1; }
	@grep -q 'agentSandboxNewest *= "$(SANDBOX_NEWEST)"' hack/release/check.go || { echo "sandboxes: agentSandboxNewest in hack/release/check.go is not SANDBOX_NEWEST, $(SANDBOX_NEWEST)"; exit 1; }
	@# The soak builds the gateway from the gateway's own go.mod, not at
	@# the leg's release: it would repeat the workspace run's soak.
	$(TEST_ENV) GOTEST="$(GOTEST) -skip=^TestSoak" hack/matrix.sh sandboxes sigs.k8s.io/agent-sandbox "$(SANDBOX_MODULES)" $(SANDBOX_RELEASES)

# tracing's suite at the OpenTelemetry release its go.mod states (the
# oldest it supports), without the workspace, whose other modules raise it.
otel-floor: ## tracing's suite at the OpenTelemetry release its go.mod states
	cd tracing && GOWORK=off ../$(PHASE) "otel-floor, tracing at $$(GOWORK=off $(GO) list -m -f '{{.Path}} {{.Version}}' go.opentelemetry.io/otel)" $(GOTEST) ./...

# The release rehearsal: every published module at a candidate version in a
# file:// module proxy, as hack/release.sh would tag it, and users' builds of
# it from scratch modules (RELEASING.md).
release-check: ## rehearse a release: the published modules in a local proxy, built as users build them
	$(PHASE) release-check hack/release-check.sh

# The flakiness gate: every timing-sensitive test STRESS_COUNT times with
# -race while a busy loop per CPU competes for the machine. It must pass
# with 0 failures.
stress: envtest ## the timing-sensitive tests 20 times with -race under CPU load; must pass with 0 failures
	$(TEST_ENV) hack/stress.sh -count=$(STRESS_COUNT) -timeout=$(STRESS_TIMEOUT) $(STRESS_PKGS)

# The helpers several modules need, kept once as templates in hack/shared
# and written into each module's own package as hack/shared/targets.txt
# lists, by a generator in the tools module hack/release (never the
# repository's workspace). `make generate` writes the copies; `make
# generated`, in `make test`, fails naming any copy that differs from what
# its template makes.
.PHONY: generate generated
SHAREDGEN = cd hack/release && GOWORK=off GOFLAGS=-mod=readonly $(GO) run ./sharedgen -root $(CURDIR)

generate: ## after changing a template in hack/shared: write every module's copy
	$(SHAREDGEN)

generated: ## fail if a copy of a shared helper differs from its template
	@$(PHASE) generated bash -c '$(SHAREDGEN) -check'

# The gofmt of the Go release in use, not the one in PATH.
gofmt: ## fail if a file needs gofmt (the gofmt of the Go release in use)
	@f=$$($(GO) env GOROOT)/bin/gofmt; test -z "$$($$f -l .)" || { echo "gofmt needed:"; $$f -l .; exit 1; }

# go vet alone, for a quick look; make test vets as it tests.
vet: gofmt ## go vet alone, for a quick look (make test vets as it tests)
	$(GO) vet $(PKGS)

# Builds only when the binaries are missing or their inputs changed.
envtest: ## build the kube-apiserver and etcd binaries the tests use, if missing or changed
	@$(PHASE) "envtest, built with $$(GOTOOLCHAIN=local $(GO) env GOVERSION)" hack/envtest.sh $(ENVTEST_DIR) $(ENVTEST_K8S_VERSION)

repro: ## the idle-connection failure and the fix side by side, no cluster needed
	$(GO) run ./examples/repro

# Baselines and candidates run interleaved (10 times unless -n says) and
# benchstat compares them; ratios come from the same run. About 5 minutes on
# 2 cores.
bench: envtest ## every benchmark against a baseline from the same run (benchstat); several minutes
	hack/benchratio.sh ./test/bench Bare Stack Kubewire RetryableHTTP OtelHTTP
	hack/benchratio.sh ./test/bench Kubewire KubewireMetrics
	hack/benchratio.sh ./test/bench Kubewire KubewireTracing KubewireOtelHTTP
	hack/benchratio.sh ./test/bench OverheadBare OverheadTimeout OverheadPooltrace OverheadStack -n 8
	hack/benchratio.sh ./test/bench RetryBaseline Retry
	hack/benchratio.sh ./test/bench RetryPutBaseline RetryPut
	$(TEST_ENV) hack/benchratio.sh ./test/bench ClientGoBare ClientGoApplied
	hack/benchratio.sh ./test/bench RecoveryClientGo RecoveryKubewire -n 5
	$(GO) test -run '^$$' -bench IdleEdge -benchtime 3x ./examples/repro
	$(GO) test -run '^$$' -bench Pass -benchtime 5x -benchmem ./driver/reconciler
	$(TEST_ENV) $(GO) test -run '^$$' -bench 'RunIdle|FenceChange|Namespaces' -benchtime 1x -timeout 60m ./test/driver/reconciler

fmt: ## gofmt -w the repository
	gofmt -w .

# The soak: the gateway under mixed connection faults and a kube-apiserver
# restart, judged against the API server's audit log (test/driver/soak). `make
# test` runs it for 30 seconds with a fixed seed (TestSoak); this runs it
# for SOAK_DURATION with SOAK_SEED and every fault, and keeps the history,
# the audit log and the report in SOAK_OUT. SOAK_SCENARIO=ha runs it on two
# kube-apiservers behind a load balancer instead, with GOAWAY chance 0.02, a
# graceful rolling restart and a kill (-soak.scenario); SOAK_FLAGS come
# after it, and can set its faults again.
SOAK_SCENARIO ?= faults
SOAK_DURATION ?= 10m
SOAK_SEED ?= $(shell date +%s)
SOAK_OUT ?= $(abspath $(shell $(GO) env GOCACHE)/../kubewire-soak)/$(SOAK_SEED)
SOAK_FLAGS ?=

soak: envtest ## the gateway under connection faults for SOAK_DURATION (10m), checked against the audit log; SOAK_SCENARIO=ha: two API servers, a rolling restart and a kill
	$(TEST_ENV) $(GO) test -count=1 -timeout 0 -run '^TestSoak$$' -v ./test/driver/soak \
		-args -soak.scenario=$(SOAK_SCENARIO) -soak.duration=$(SOAK_DURATION) -soak.seed=$(SOAK_SEED) -soak.out=$(SOAK_OUT) $(SOAK_FLAGS)

# Every target with a "## " comment on its rule's line, one line each.
# `make` alone still runs `make test`, the first target.
help: ## list these targets, one line each
	@awk -F':.*## ' '/^[a-zA-Z0-9_.-]+:.*## / { printf "  %-14s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)
