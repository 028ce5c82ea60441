GO ?= go

.PHONY: test vet repro bench fmt

test: vet
	$(GO) test -race -count=1 ./...

vet:
	@test -z "$$(gofmt -l .)" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
	$(GO) vet ./...

repro:
	$(GO) run ./examples/repro

bench:
	$(GO) test -run '^$$' -bench . -benchmem -count 10 ./transport/... ./timeout/... ./pooltrace/... | tee bench.txt

fmt:
	gofmt -w .
