GO ?= go

# The envtest binaries (kube-apiserver and etcd) are built from Go modules by
# the tools module in hack/envtest and cached outside the repository, so a
# second run takes seconds.
ENVTEST_K8S_VERSION := 1.37.2
ENVTEST_DIR ?= $(abspath $(shell $(GO) env GOCACHE)/../kubewire-envtest/$(ENVTEST_K8S_VERSION))

# The API server reports this version, as a release build would.
ENVTEST_LDFLAGS := -X k8s.io/component-base/version.gitVersion=v$(ENVTEST_K8S_VERSION) \
	-X k8s.io/component-base/version.gitMajor=$(word 1,$(subst ., ,$(ENVTEST_K8S_VERSION))) \
	-X k8s.io/component-base/version.gitMinor=$(word 2,$(subst ., ,$(ENVTEST_K8S_VERSION))) \
	-X k8s.io/component-base/version.gitTreeState=clean

.PHONY: test vet envtest repro bench fmt

test: vet envtest
	KUBEBUILDER_ASSETS=$(ENVTEST_DIR) $(GO) test -race -count=1 ./...

vet:
	@test -z "$$(gofmt -l .)" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
	$(GO) vet ./...

envtest: $(ENVTEST_DIR)/kube-apiserver $(ENVTEST_DIR)/etcd

$(ENVTEST_DIR)/kube-apiserver: hack/envtest/go.mod hack/envtest/go.sum Makefile
	@mkdir -p $(ENVTEST_DIR)
	cd hack/envtest && $(GO) build -ldflags '$(ENVTEST_LDFLAGS)' -o $@.tmp k8s.io/kubernetes/cmd/kube-apiserver && mv $@.tmp $@

$(ENVTEST_DIR)/etcd: hack/envtest/go.mod hack/envtest/go.sum
	@mkdir -p $(ENVTEST_DIR)
	cd hack/envtest && $(GO) build -o $@.tmp go.etcd.io/etcd/server/v3 && mv $@.tmp $@

repro:
	$(GO) run ./examples/repro

# Each pair is run interleaved 10 times and compared with benchstat.
bench: envtest
	hack/benchratio.sh ./bench Bare Stack 10
	hack/benchratio.sh ./bench RetryBaseline Retry 10
	KUBEBUILDER_ASSETS=$(ENVTEST_DIR) hack/benchratio.sh ./kubeadapter ClientGoBare ClientGoApplied 10

fmt:
	gofmt -w .
