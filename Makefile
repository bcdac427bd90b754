# abi-engine: build, test and run targets. `make test` is what CI runs.
GO ?= go

SERVICES := internal/testservices/services.sh

.PHONY: all build vet test test-short services services-stop run

all: vet build

build:
	$(GO) build ./...

vet:
	$(GO) vet ./...

## test: start the test servers (PostgreSQL, versitygw), vet, run the whole
## suite under the race detector with every backend required, then stop
## the servers this run started, whether the tests pass or not.
test:
	@set -e; exports=$$($(SERVICES) start); eval "$$exports"; \
	trap '$(SERVICES) stop' EXIT; trap 'exit 130' INT TERM; \
	export ENGINE_TEST_REQUIRE_BACKENDS=1; \
	$(GO) vet ./...; \
	$(GO) test -race -count=1 ./...

## services: start the test servers and print the exports for your shell:
## eval "$(make -s services)"; stop them with `make services-stop`.
services:
	@$(SERVICES) start

## services-stop: stop the test servers `make services` started.
services-stop:
	@$(SERVICES) stop

## test-short: the suite without the race detector, for a quick loop.
test-short:
	$(GO) test -count=1 ./...

## run: an engine on embedded defaults.
run:
	$(GO) run ./cmd/engine
