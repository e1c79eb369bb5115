# Lush. `make demo` runs the quickstart on the embedded default; `make test` runs every test.
# Both install what they need on a fresh machine: npm packages into .tools/node, Go tools into
# .tools/bin (pinned), never globally.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := build

GO        ?= go
TOOLS     := $(CURDIR)/.tools
BIN       := $(CURDIR)/bin
NODE_DIR  := $(TOOLS)/node
LUSHCTL   := $(BIN)/lushctl
NOTES     := $(BIN)/notes
PARTNER   := $(BIN)/partner-agent
AUTHSERVER := $(BIN)/authserver
HYDRA     := $(TOOLS)/bin/hydra
HELM      := $(TOOLS)/bin/helm
KUBECONFORM := $(TOOLS)/bin/kubeconform

STATICCHECK_VERSION := v0.8.2
BENCHSTAT_VERSION   := v0.0.0-20260908200009-22c9c6c9d4da
OPA_VERSION         := v1.22.2
HELM_VERSION        := v3.22.0
KUBECONFORM_VERSION := v0.8.0
# The Kubernetes release whose schemas the chart is validated against (test/helm_test.go's
# kubernetesVersion): the API of Kubernetes 1.37.2, from the k8s.io/kubernetes module v1.37.2.
K8S_VERSION         := 1.37.2
K8S_SCHEMAS         := $(TOOLS)/k8s-schemas/v$(K8S_VERSION)-standalone-strict
# The ServiceMonitor's schema comes from this Prometheus Operator release's CRD.
PROMETHEUS_OPERATOR_VERSION := v0.85.0

export LUSH_NODE_PREFIX := $(NODE_DIR)
export PATH := $(TOOLS)/bin:$(PATH)

# Test timeout for the whole suite; CI has a 25-minute budget for everything.
TEST_TIMEOUT ?= 15m
FUZZTIME     ?= 30s
BENCH        ?= .
BENCHCOUNT   ?= 6

.PHONY: build test test-vault stress vet lint fmt demo bench bench-gateway fuzz tools node-tools go-tools opa-tool hydra-tool helm-tool kubeconform-tool chart postgres chromium clean help

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | column -t -s "$$(printf '\t')"

build: ## build bin/lushctl (and bin/notes, the demo's bearer-token MCP server; bin/partner-agent, its remote A2A agent; bin/authserver, its OAuth authorization server)
	$(GO) build -o $(LUSHCTL) ./cmd/lushctl
	$(GO) build -o $(NOTES) ./examples/notes
	$(GO) build -o $(PARTNER) ./examples/partner-agent
	$(GO) build -o $(AUTHSERVER) ./examples/authserver

tools: node-tools go-tools opa-tool hydra-tool helm-tool kubeconform-tool ## install test and lint tools into .tools

node-tools: $(NODE_DIR)/.installed
$(NODE_DIR)/.installed: test/node/package.json test/node/package-lock.json
	@command -v npm >/dev/null || { echo "npm is missing: install Node.js (apt-get install -y nodejs npm)"; exit 1; }
	@mkdir -p $(NODE_DIR)
	cp test/node/package.json test/node/package-lock.json $(NODE_DIR)/
	cd $(NODE_DIR) && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

go-tools: $(TOOLS)/bin/staticcheck $(TOOLS)/bin/benchstat

# The real opa CLI, to prove that any OPA loads Lush's bundles (test/opa_test.go).
opa-tool: $(TOOLS)/bin/opa
$(TOOLS)/bin/opa:
	GOBIN=$(TOOLS)/bin $(GO) install github.com/open-policy-agent/opa@$(OPA_VERSION)
# Ory Hydra, the real OAuth 2.1 / OIDC authorization server of the OAuth tests and the demo
# (examples/authserver). It is built from test/tools/hydra, a module of its own, so the project's
# go.mod does not inherit Hydra's dependencies; cgo and the sqlite tag give it DSN=memory. Built
# only when missing. Measured on 2 busy cores: 1.5 minutes on a fresh build cache, 8 minutes with a
# fresh module cache too (the downloads dominate).
hydra-tool: $(HYDRA)
$(HYDRA):
	@command -v gcc >/dev/null || command -v cc >/dev/null || { echo "a C compiler is missing (Hydra's sqlite needs cgo): apt-get install -y gcc"; exit 1; }
	cd test/tools/hydra && CGO_ENABLED=1 $(GO) build -tags sqlite,sqlite_omit_load_extension -o $(HYDRA) github.com/ory/hydra/v2
# The Helm chart's checks (deploy/helm/lush, test/helm_test.go): Helm itself, and kubeconform with
# the JSON schemas of Kubernetes $(K8S_VERSION)'s built-in kinds and of the ServiceMonitor. kubeconform downloads schemas from
# GitHub at run time; here they are made offline by test/tools/k8sschemas (a module of its own)
# from api/openapi-spec/swagger.json of the k8s.io/kubernetes module, fetched through the Go module
# proxy (a 21 MB zip). Measured with fresh module and build caches (GOMODCACHE, GOCACHE) on 2
# cores: helm 2.6 minutes on a quiet machine, 14.4 minutes at a load average of 25; kubeconform
# 5-13 seconds; the schemas 30 seconds at a load average of 11 (25 MB of modules; 326 kinds,
# 14 MB). With warm Go caches (CI's fresh clone on a used machine) each takes seconds. Built only
# when missing.
helm-tool: $(HELM)
$(HELM):
	GOBIN=$(TOOLS)/bin $(GO) install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)
kubeconform-tool: $(KUBECONFORM) $(K8S_SCHEMAS)/servicemonitor-monitoring-v1.json
$(KUBECONFORM):
	GOBIN=$(TOOLS)/bin $(GO) install github.com/yannh/kubeconform/cmd/kubeconform@$(KUBECONFORM_VERSION)
$(K8S_SCHEMAS)/servicemonitor-monitoring-v1.json:
	cd test/tools/k8sschemas && $(GO) run . -version $(K8S_VERSION) -out $(TOOLS)/k8s-schemas \
	  -crd github.com/prometheus-operator/prometheus-operator@$(PROMETHEUS_OPERATOR_VERSION)/example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml

# The chart's checks alone: lint, render and validate the defaults and every example.
chart: helm-tool kubeconform-tool ## check the Helm chart (helm lint, helm template, kubeconform) over every example
	$(GO) test -count=1 -run '^(TestHelmChart|TestHelmChartRefusesBadValues|TestHelmChartPodRuns|TestHelmChartXDSCommand|TestKubeconformSchemasAreStrict)$$' ./test

$(TOOLS)/bin/staticcheck:
	GOBIN=$(TOOLS)/bin $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
$(TOOLS)/bin/benchstat:
	GOBIN=$(TOOLS)/bin $(GO) install golang.org/x/perf/cmd/benchstat@$(BENCHSTAT_VERSION)

# PostgreSQL for the tests that need a real server (test/pgtest): Debian's postgresql
# package, installed only when initdb is neither on PATH nor in /usr/lib/postgresql/*/bin.
postgres: ## install PostgreSQL (apt-get) for the database tests, unless it is there
	@if command -v initdb >/dev/null || compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null; then exit 0; fi; \
	command -v apt-get >/dev/null || { echo "PostgreSQL is missing: install it (initdb, pg_ctl) with your package manager"; exit 1; }; \
	sudo=; if [ "$$(id -u)" -ne 0 ] && command -v sudo >/dev/null; then sudo=sudo; fi; \
	echo "installing postgresql: $${sudo:+sudo }apt-get install -y --no-install-recommends postgresql"; \
	$$sudo apt-get update && $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql

# Chromium for the web UI's browser test (audit/audithttp/ui_test.go, headless): Debian's chromium
# package, installed only when /usr/bin/chromium is missing.
chromium: ## install Chromium (apt-get) for the UI's browser test, unless it is there
	@if [ -x /usr/bin/chromium ]; then exit 0; fi; \
	command -v apt-get >/dev/null || { echo "Chromium is missing: install it (/usr/bin/chromium) with your package manager, or set LUSH_CHROMIUM"; exit 1; }; \
	sudo=; if [ "$$(id -u)" -ne 0 ] && command -v sudo >/dev/null; then sudo=sudo; fi; \
	echo "installing chromium: $${sudo:+sudo }apt-get install -y --no-install-recommends chromium"; \
	$$sudo apt-get update && $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium

test: node-tools opa-tool hydra-tool helm-tool kubeconform-tool postgres chromium vet ## run every test (race detector on), golden files, Rego tests and fuzz seeds
	$(GO) test -race -timeout $(TEST_TIMEOUT) ./...
	$(GO) mod tidy -diff

# The flake hunt (docs/testing.md): the whole suite STRESS_COUNT times with the race detector
# while a loop of full rebuilds keeps every core busy, then the concurrent packages at -cpu 1,2,4.
STRESS_COUNT ?= 5
STRESS_PKGS  ?= ./policies/decisionlog ./policies/enforce ./policies/budget ./policies/approval ./scheduler ./gateway \
	./mesh/extauthz ./internal/upstream ./internal/mcphttp ./agentd ./cmd/lushctl/stack
stress: node-tools opa-tool hydra-tool helm-tool kubeconform-tool postgres chromium ## run every test STRESS_COUNT times under load, then the concurrent packages at -cpu 1,2,4
	setsid bash -c 'while :; do $(GO) build -a -o /dev/null ./cmd/lushctl >/dev/null 2>&1; done' & load=$$!; \
	trap 'kill -- -$$load 2>/dev/null' EXIT; \
	$(GO) test -race -count $(STRESS_COUNT) -timeout 90m ./... && \
	$(GO) test -race -count 2 -cpu 1,2,4 -timeout 60m $(STRESS_PKGS)

test-vault: ## the Vault integration tests against a real Vault: VAULT_ADDR=… VAULT_TOKEN=… make test-vault
	@if [ -z "$${VAULT_ADDR:-}" ] || [ -z "$${VAULT_TOKEN:-}" ]; then echo "set VAULT_ADDR and VAULT_TOKEN (a token that may write secret/ and create tokens)"; exit 2; fi
	$(GO) test -count=1 -race -run 'Vault' -v ./vault

vet:
	$(GO) vet ./...

lint: go-tools ## gofmt, go vet, staticcheck
	@unformatted=$$(gofmt -l $$(git ls-files --cached --others --exclude-standard '*.go')); if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	staticcheck ./...

fmt:
	gofmt -w $$(git ls-files --cached --others --exclude-standard '*.go')

demo: build node-tools hydra-tool ## the quickstart end to end: build, errors, policy tests, the gateway, the decision log
	LUSHCTL=$(LUSHCTL) NOTES=$(NOTES) PARTNER=$(PARTNER) AUTHSERVER=$(AUTHSERVER) LUSH_HYDRA=$(HYDRA) examples/demo.sh

bench: go-tools ## benchmarks; results in .tools/bench.txt, summarized by benchstat; then bench-gateway
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchmem -count $(BENCHCOUNT) ./... | tee $(TOOLS)/bench.txt
	benchstat $(TOOLS)/bench.txt
	$(MAKE) bench-gateway

# The hot path side by side in one run (issue 21, test/perf): the real lushctl gateway and its
# ext_authz as their own processes, the echo server, a bare reverse proxy, a no-op ext_authz
# server, and one decision against a plain RBAC policy. About 2 minutes; the report is also in
# .tools/bench-gateway.md. LUSH_PERF_DURATION (5s), LUSH_PERF_CLIENTS (1,64), LUSH_PERF_RATE
# (2000), LUSH_PERF_AUTHZ_DURATION (5s) and LUSH_PERF_DECISION_DURATION (2s) change what it does.
bench-gateway: opa-tool ## the hot path side by side (issue 21's table): gateway, bare proxy, ext_authz, one decision vs RBAC
	@mkdir -p $(TOOLS)
	LUSH_PERF=1 LUSH_PERF_OUT=$(TOOLS)/bench-gateway.md $(GO) test -count=1 -timeout 15m -run '^TestHotPath$$' ./test/perf
	@cat $(TOOLS)/bench-gateway.md

# What idle sessions and open GET streams cost the real lushctl gateway (issue 21, test/perf):
# RSS, Go heap and goroutines with 0, 1,000 and 10,000 idle sessions, then 1,000 and 10,000 GET
# streams (docs/memory.md). About 20 seconds; the report is also in .tools/bench-memory.md.
# LUSH_PERF_SESSIONS (10000) and LUSH_PERF_STREAMS (10000) change the counts.
.PHONY: bench-memory
bench-memory: ## what an idle session and an open stream cost the gateway process (RSS, heap, goroutines)
	@mkdir -p $(TOOLS)
	LUSH_PERF=1 LUSH_PERF_OUT=$(TOOLS)/bench-memory.md $(GO) test -count=1 -timeout 15m -run '^TestSessionMemory$$' ./test/perf
	@cat $(TOOLS)/bench-memory.md

fuzz: ## run every fuzz target for FUZZTIME each; new crashers land in testdata/fuzz
	@for pkg in $$($(GO) list ./...); do \
	  for target in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "== $$pkg $$target"; \
	    $(GO) test $$pkg -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZTIME); \
	  done; \
	done

clean:
	rm -rf $(BIN) $(TOOLS) examples/*/.lush examples/errors/*/.lush
