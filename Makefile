GO ?= go

.PHONY: test vet repro bench fmt

test: vet
	$(GO) test -race -count=1 ./...

vet:
	@test -z "$$(gofmt -l .)" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
	$(GO) vet ./...

repro:
	$(GO) run ./examples/repro

# Each pair is run interleaved 10 times and compared with benchstat.
bench:
	hack/benchratio.sh ./bench Bare Stack 10
	hack/benchratio.sh ./bench RetryBaseline Retry 10

fmt:
	gofmt -w .
