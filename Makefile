# abi-engine: build, test and run targets. `make test` is what CI runs.
GO ?= go

.PHONY: all build vet test test-short run

all: vet build

build:
	$(GO) build ./...

vet:
	$(GO) vet ./...

## test: vet, then the whole suite under the race detector.
test: vet
	$(GO) test -race -count=1 ./...

## test-short: the suite without the race detector, for a quick loop.
test-short:
	$(GO) test -count=1 ./...

## run: an engine on embedded defaults.
run:
	$(GO) run ./cmd/engine
