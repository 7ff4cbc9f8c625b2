# Run `make help` for the list of targets.
GO ?= go
TEST_TIMEOUT ?= 12m

.DEFAULT_GOAL := help
.PHONY: help run test fuzz bench soak lint build

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  %-8s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

build: ## build the binaries into ./bin
	$(GO) build -o bin/ ./cmd/...

run: ## run the whole system locally: migrations, api, worker, fake downstream
	./scripts/run.sh

test: ## every test, against a real PostgreSQL, with -race (and Chromium for River UI)
	./scripts/postgres.sh
	./scripts/chromium.sh
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...

lint: ## go vet and gofmt
	$(GO) vet ./...
	@test -z "$$(gofmt -l .)" || { gofmt -l .; exit 1; }
