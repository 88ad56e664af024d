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
# End-to-end tests marked t.Parallel() (tests/harness_test.go says which) run this
# many at a time: mostly they wait on brokers, groups and databases, not on the 2 cores.
# make chaos runs each full-size scenario alone (-parallel 1): their timings are the
# figures the docs quote.
E2E_PARALLEL = 4
# Integration tests must not skip under make: a missing service is a failure here.
export SP_TEST_REQUIRE_SERVICES = 1

.PHONY: help build go-check run test chaos bench bench-summary docs fmt vet lint stack-up stack-down clean alerts

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

build: go-check ## build bin/speculapro
	go build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/speculapro

GO_WANT := $(shell sed -n 's/^go //p' go.mod)
go-check: ## check that Go is installed and at least go.mod's version
	@command -v go >/dev/null || { echo "Go is not installed: install Go $(GO_WANT) or newer from https://go.dev/dl/ (docs/getting-started.md: Prerequisites)" >&2; exit 1; }
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

alerts: ## check deploy/observability/alerts.yaml and run its unit tests (promtool, from the prometheus package)
	@command -v promtool >/dev/null || { echo "promtool not found: make stack-up installs it (Debian package prometheus)" >&2; exit 1; }
	promtool check rules deploy/observability/alerts.yaml
	promtool test rules deploy/observability/alerts_test.yaml

lint: build ## lint every pipeline, run their *_benthos_test.yaml unit tests and the starter rules' tests
	$(BIN) lint pipelines/*.yaml config/*.yaml config/examples/*.yaml
	$(BIN) test ./pipelines/... ./config/examples/...
	$(BIN) rules test config/rules/*.yaml

# make test says when each phase starts, so a long run shows where it is.
PHASE = @echo "== make test: $(1) ($$(date -u +%T) UTC) =="

test: ## run every test against real services (about 14 minutes on 2 cores; each phase says when it starts)
	$(call PHASE,local stack)
	@$(MAKE) --no-print-directory stack-up
	$(call PHASE,go vet)
	@$(MAKE) --no-print-directory vet
	$(call PHASE,lint pipelines and starter rules)
	@$(MAKE) --no-print-directory lint
	$(call PHASE,alert rules)
	@$(MAKE) --no-print-directory alerts
	$(call PHASE,gofmt)
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(call PHASE,unit and integration tests under the race detector)
	go test -race -count=1 -timeout 15m $(RACE_PKGS)
	$(call PHASE,end-to-end tests in tests/)
	SP_TEST_BINARY=$(abspath $(BIN)) go test -count=1 -timeout 17m -parallel $(E2E_PARALLEL) $(E2E_PKGS)
	$(call PHASE,done)

chaos: stack-up ## the crash, outage and stream exactness/replay scenarios at full size
	SP_TEST_SCALE=full go test -count=1 -timeout 60m -parallel 1 -run 'Crash|Outage|Poison|Shutdown|NeverCommits|StreamExactness|StreamReplay|WorkerDelivers|IngestInFlightLimit|RevokedBatch|ResumesSeconds|ForeignRecords|RedisClusterFailover|KafkaClusterFailover' -v $(E2E_PKGS)

# make bench: every benchmark (BENCH=<regexp> picks some), then one summary table of the rows they
# reported with benchSummary (tests/bench_summary_test.go), printed and written into BENCH_DOC between
# its <!-- bench-summary:begin --> and <!-- bench-summary:end --> lines (the rest of the page is kept).
# BENCH_WHEN and BENCH_MACHINE say when and on what the table was measured.
BENCH         ?= .
BENCH_ROWS    ?= .cache/bench-summary.tsv
BENCH_DOC     ?= docs/benchmarks.md
BENCH_WHEN    ?= $(shell date -u +'%Y-%m-%d %H:%M UTC')
BENCH_MACHINE ?= $(shell echo "$$(nproc) cores, $$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | sed -n 1p)")

bench: stack-up ## benchmarks, each reported against a baseline measured in the same run, then the summary table
	@mkdir -p $(dir $(BENCH_ROWS)) && rm -f $(BENCH_ROWS)
	status=0; SP_TEST_BENCH_SUMMARY=$(CURDIR)/$(BENCH_ROWS) go test -p 1 -run '^$$' -bench '$(BENCH)' -benchmem -count=1 -timeout 60m ./... || status=$$?; \
	  $(MAKE) --no-print-directory bench-summary || true; exit $$status

bench-summary: ## print the summary table of the last make bench and write it into docs/benchmarks.md
	@test -s $(BENCH_ROWS) || { echo "no benchmark rows in $(BENCH_ROWS): run make bench"; exit 1; }
	@grep -qx '<!-- bench-summary:begin -->' $(BENCH_DOC) && grep -qx '<!-- bench-summary:end -->' $(BENCH_DOC) || \
	  { echo "$(BENCH_DOC) lacks the <!-- bench-summary:begin --> and <!-- bench-summary:end --> lines"; exit 1; }
	@awk -F'\t' -v when='$(BENCH_WHEN)' -v machine='$(BENCH_MACHINE)' -v bench='$(BENCH)' ' \
	  !($$1 in row) { order[n++] = $$1 } { row[$$1] = $$0 } \
	  END { printf "The benchmarks matching `%s`, table written %s on %s (PostgreSQL, Kafka and Redis on the same machine).\n\n", bench, when, machine; \
	        print "| Metric | Value | Baseline (same run) | Ratio | Aim |"; print "| --- | ---: | --- | ---: | --- |"; \
	        for (i = 0; i < n; i++) { split(row[order[i]], f, "\t"); printf "| %s | %s | %s | %s | %s |\n", f[1], f[2], f[3], f[4], f[5] } }' \
	  $(BENCH_ROWS) > $(BENCH_ROWS).md
	@awk -v table='$(BENCH_ROWS).md' ' \
	  $$0 == "<!-- bench-summary:end -->" { skip = 0 } \
	  !skip { print } \
	  $$0 == "<!-- bench-summary:begin -->" { print ""; while ((getline line < table) > 0) print line; print ""; skip = 1 }' \
	  $(BENCH_DOC) > $(BENCH_DOC).tmp && mv $(BENCH_DOC).tmp $(BENCH_DOC)
	@cat $(BENCH_ROWS).md

# make docs: every generated page, each written by the test that checks it in make test.
docs: ## regenerate the generated pages: docs/components/ and the settings table in docs/configuration.md
	go test -count=1 ./internal/componentdocs -run '^TestComponentPages$$' -update
	go test -count=1 ./internal/config -run '^TestDocumentsListEverySetting$$' -update

fmt: ## gofmt every Go file
	gofmt -w $$(git ls-files '*.go')

clean: ## remove build output and the dev broker's data
	rm -rf bin .speculapro
