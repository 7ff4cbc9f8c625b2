# Run `make help` for the list of targets.
GO ?= go
# The Go toolchain every target builds, tests and ships with; the go command
# fetches it from the module proxy the first time. A machine ignores the
# go.mod's version for this, so it is exported here.
export GOTOOLCHAIN = go1.27.3
TEST_TIMEOUT ?= 30m
STATICCHECK_VERSION = v0.8.2
# goimports rather than gci: gci v0.14.0 knows the standard library of Go
# 1.25 and takes uuid (standard since Go 1.27) for a third-party package.
GOIMPORTS_VERSION = v0.52.0

.DEFAULT_GOAL := help
.PHONY: help run test docs fuzz bench bench-scale bench-plot soak failover vuln lint build

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

build: ## build the binaries into ./bin
	$(GO) build -o bin/ ./cmd/...

run: ## run the whole system locally (DATABASE_URL, or a private PostgreSQL): migrations, api, worker, fake downstream, demo form
	./scripts/run.sh

test: ## every test, with -race, against TEST_DATABASE_URL or a private PostgreSQL (installs Chromium, promtool and Mailpit where missing)
	./scripts/chromium.sh
	./scripts/promtool.sh
	GO=$(GO) ./scripts/mailpit.sh
	$(GO) vet ./...
	./scripts/postgres.sh -v TEST_DATABASE_URL -- $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...
	cd deploy/helm && $(GO) vet ./... && $(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./...

docs: ## write the docs' generated tables and the quick start's output from the code and real processes
	$(GO) test -count=1 ./docs/ -update
	./scripts/postgres.sh -v TEST_DATABASE_URL -- $(GO) test -count=1 -run '^TestDocs' ./e2e/ -update

fuzz: ## run each fuzz target for FUZZTIME (default 30s)
	./scripts/fuzz.sh $(or $(FUZZTIME),30s)

bench: ## measure throughput and latency against PostgreSQL's own limit (see docs/performance.md)
	./scripts/postgres.sh -v TEST_DATABASE_URL -v DATABASE_URL -- $(GO) run ./cmd/bench $(BENCH_FLAGS)

bench-scale: ## how cost grows with 10k, 1M and 10M rows in the tables, and the clean-up (long; BENCH_SCALE_FLAGS)
	./scripts/postgres.sh -v TEST_DATABASE_URL -v DATABASE_URL -- $(GO) run ./cmd/bench scale $(BENCH_SCALE_FLAGS)

bench-plot: ## draw docs/bench-scale.png from bench-scale.json
	$(GO) run ./cmd/bench plot -in bench-scale.json -out docs/bench-scale.png

soak: ## a chaos soak of the whole system and its destinations (about 2 minutes; SOAK_FLAGS=-duration=10m for longer; installs Mailpit where missing)
	GO=$(GO) ./scripts/mailpit.sh
	./scripts/postgres.sh -v TEST_DATABASE_URL -v DATABASE_URL -- $(GO) run ./cmd/soak $(SOAK_FLAGS)

failover: ## a database failover drill: primary and standby of their own, sync and async (FAILOVER_FLAGS)
	$(GO) run ./cmd/failover $(FAILOVER_FLAGS)

vuln: ## govulncheck
	./scripts/govulncheck.sh

lint: ## go vet, staticcheck, gofmt, import groups, and no large binary file in the repository
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...
	@gofmt="$$($(GO) env GOROOT)/bin/gofmt"; test -z "$$($$gofmt -l .)" || { $$gofmt -l .; exit 1; }
	@out="$$($(GO) run golang.org/x/tools/cmd/goimports@$(GOIMPORTS_VERSION) -l -local github.com/leadintake/leadintake .)"; \
	  test -z "$$out" || { echo "imports not in three groups (standard library, third-party, github.com/leadintake/leadintake):"; echo "$$out"; exit 1; }
	./scripts/large-binaries.sh
