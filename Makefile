# SpeculaPro: one binary, YAML pipelines, real services. `make help` lists the targets.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c

BIN      ?= bin/speculapro
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT   ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
BUILT    ?= $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
LDFLAGS  := -X main.version=$(VERSION) -X main.commit=$(COMMIT) -X main.built=$(BUILT)
# Unit and integration tests of our packages run under the race detector; the
# end-to-end tests in tests/ drive the built binary, where -race would only slow
# the binary down without watching the test code that matters.
RACE_PKGS = $$(go list ./... | grep -v /tests$$)
E2E_PKGS  = ./tests/...
# Integration tests must not skip under make: a missing service is a failure here.
export SP_TEST_REQUIRE_SERVICES = 1

.PHONY: help build go-check run test chaos bench fmt vet lint stack-up stack-down clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

build: go-check ## build bin/speculapro
	go build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/speculapro

GO_WANT := $(shell sed -n 's/^go //p' go.mod)
go-check: ## check that Go is installed and at least go.mod's version
	@command -v go >/dev/null || { echo "Go is not installed: install Go $(GO_WANT) or newer from https://go.dev/dl/ (README: Prerequisites)" >&2; exit 1; }
	@have=$$(go env GOVERSION | sed 's/^go//'); \
	  [ "$$(printf '%s\n%s\n' "$(GO_WANT)" "$$have" | sort -V | head -1)" = "$(GO_WANT)" ] || \
	  { echo "Go $$have is older than go.mod's $(GO_WANT): install Go $(GO_WANT) or newer from https://go.dev/dl/" >&2; exit 1; }

stack-up: ## install (if missing) and start PostgreSQL, Redis and Kafka on loopback
	bash deploy/local/stack.sh up

stack-down: ## stop what stack-up started
	bash deploy/local/stack.sh down

run: stack-up build ## start the whole pipeline on this machine (embedded broker unless SP_KAFKA_BROKERS is set)
	$(BIN) dev

vet: ## go vet every package
	go vet ./...

lint: build ## lint every pipeline, run their *_benthos_test.yaml unit tests and the starter rules' tests
	$(BIN) lint pipelines/*.yaml config/*.yaml config/examples/*.yaml
	$(BIN) test ./pipelines/... ./config/examples/...
	$(BIN) rules test config/rules/*.yaml

test: stack-up vet lint ## run every test against real services (under 20 minutes)
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	go test -race -count=1 -timeout 15m $(RACE_PKGS)
	go test -count=1 -timeout 15m $(E2E_PKGS)

chaos: stack-up ## the crash, outage and stream exactness/replay scenarios at full size
	SP_TEST_SCALE=full go test -count=1 -timeout 60m -run 'Crash|Outage|Poison|Shutdown|NeverCommits|StreamExactness|StreamReplay|WorkerDelivers|IngestInFlightLimit|RevokedBatch|ResumesSeconds|ForeignRecords' -v $(E2E_PKGS)

bench: stack-up ## benchmarks, each reported against a baseline measured in the same run
	go test -run '^$$' -bench . -benchmem -count=1 -timeout 60m ./...

fmt: ## gofmt every Go file
	gofmt -w $$(git ls-files '*.go')

clean: ## remove build output and the dev broker's data
	rm -rf bin .speculapro
