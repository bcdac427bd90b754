# abi-engine: build, test and run targets. `make test` is what CI runs.
GO ?= go

SERVICES := internal/testservices/services.sh
# EXAMPLES are modules of their own (out-of-tree adapters built on the
# engine's public packages): ./... of the engine does not reach them.
EXAMPLES := examples/redis-keyvalue

.PHONY: all build vet crossbuild test test-short services services-stop run bench chaos linearizable fuzz sim

all: vet build

build:
	$(GO) build ./...
	@for m in $(EXAMPLES); do (cd $$m && $(GO) build ./...) || exit 1; done

vet:
	$(GO) vet ./...
	@for m in $(EXAMPLES); do (cd $$m && $(GO) vet ./...) || exit 1; done

## crossbuild: build the engine for Windows and macOS, and vet it for
## Windows with its tests, so code that only builds on Linux (a Unix-only
## syscall without a build-tagged fallback) fails here rather than on a
## developer's machine. It reuses the build cache: about 30 s on a loaded
## two-core machine, longer on a cold cache. CI runs it after `make test`,
## outside that run's time.
crossbuild:
	GOOS=windows $(GO) build ./...
	GOOS=windows $(GO) vet ./...
	GOOS=darwin $(GO) build ./...

## test: start the test servers (PostgreSQL, versitygw, Redis), vet,
## run the whole suite and the examples' under
## the race detector with every backend required, then stop the servers this run started, whether the
## tests pass or not. A package gets 20 minutes rather than go test's 10:
## the app package's simulation alone took over 8 on a two-core machine
## loaded twelve times over, where it takes about one on an idle one.
test:
	@set -e; exports=$$($(SERVICES) start); eval "$$exports"; \
	trap '$(SERVICES) stop' EXIT; trap 'exit 130' INT TERM; \
	export ENGINE_TEST_REQUIRE_BACKENDS=1; \
	$(GO) vet ./...; \
	for m in $(EXAMPLES); do (cd $$m && $(GO) vet ./...); done; \
	$(GO) test -race -count=1 -timeout 20m ./...; \
	for m in $(EXAMPLES); do (cd $$m && $(GO) test -race -count=1 -timeout 20m ./...); done

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
	@for m in $(EXAMPLES); do (cd $$m && $(GO) test -count=1 ./...) || exit 1; done

## run: an engine on embedded defaults.
run:
	$(GO) run ./cmd/engine

## bench: every scenario of cmd/enginebench on this machine, as a table
## (BENCHFLAGS="-json -duration 2s" and the like). The handover uses
## PostgreSQL when ENGINE_TEST_PG_DSN is set (eval "$(make -s services)").
BENCHFLAGS ?=
bench:
	$(GO) run ./cmd/enginebench $(BENCHFLAGS)

## chaos: the chaos run at its normal setting, a summary line per fault;
## `make test` runs it at the short setting.
chaos:
	ENGINE_CHAOS=normal $(GO) test -count=1 -v -timeout 20m -run 'TestChaos$$' ./internal/chaos/

## linearizable: the linearizability check over real engine processes at
## its long setting (more rounds of deploys, pauses and crashes, more
## clients); `make test` runs it at the short setting. Needs PostgreSQL
## (eval "$(make -s services)").
linearizable:
	ENGINE_TEST_REQUIRE_BACKENDS=1 ENGINE_LINEARIZABLE=long $(GO) test -count=1 -v -timeout 20m -run 'TestLinearizable$$' ./internal/linearizable/

## sim: the whole-engine simulation over 100,000 seeds (SIMSEEDS), without
## the race detector, printing how often each rare path ran; `make test`
## runs 2,000 seeds.
SIMSEEDS ?= 100000
sim:
	cd app && $(GO) test -count=1 -timeout 60m -run 'TestEngineSimulation$$' . -engine-sim.seeds=$(SIMSEEDS) -engine-sim.counts

## fuzz: every fuzz target in the repository for FUZZTIME each, starting
## from the seeds under each package's testdata/.
FUZZTIME ?= 10s
fuzz:
	@set -e; list=$$($(GO) test -list 'Fuzz.*' ./...); echo "$$list" | \
	awk '/^Fuzz/ { t[n++] = $$1 } /^(ok|\?)/ { for (i = 0; i < n; i++) print $$2, t[i]; n = 0 }' | \
	while read -r pkg target; do \
		echo "fuzz $$pkg $$target ($(FUZZTIME))"; \
		$(GO) test -run '^$$' -fuzz "^$$target$$" -fuzztime $(FUZZTIME) "$$pkg" </dev/null; \
	done
