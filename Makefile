# teardown-operator. `make help` lists the targets.
SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

ROOT := $(abspath .)
BIN := $(ROOT)/bin
export PATH := $(BIN):$(PATH)
GO ?= go

CONTROLLER_GEN_VERSION ?= v0.23.0
STATICCHECK_VERSION ?= v0.8.2
GINKGO_VERSION ?= v2.34.0

CONTROLLER_GEN := $(BIN)/controller-gen
STATICCHECK := $(BIN)/staticcheck
GINKGO := $(BIN)/ginkgo
CONTROL_PLANE := $(BIN)/kube-apiserver $(BIN)/etcd $(BIN)/kwokctl

# envtest finds etcd and kube-apiserver here, built from source by `make control-plane`.
export KUBEBUILDER_ASSETS := $(BIN)

.PHONY: help
help: ## Show this help.
	@grep -hE '^[a-z][a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-20s %s\n", $$1, $$2}'

##@ Build

.PHONY: build
build: ## Build the operator into bin/.
	$(GO) build -o $(BIN)/teardown-operator ./cmd/teardown-operator

.PHONY: plugin
plugin: ## Build the kubectl plugin, kubectl-teardown, and its completion helper into bin/ (put bin/ on PATH: kubectl teardown).
	$(GO) build -o $(BIN)/kubectl-teardown ./cmd/kubectl-teardown
	install -m 0755 plugins/kubectl_complete-teardown $(BIN)/kubectl_complete-teardown

.PHONY: plugin-archives
plugin-archives: ## Build kubectl-teardown for linux and darwin (amd64, arm64) and the krew manifest into bin/plugin/.
	bash plugins/archives.sh

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate deepcopy code from the API markers.
	$(CONTROLLER_GEN) object paths=./api/...

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Generate CRDs and RBAC from the markers.
	$(CONTROLLER_GEN) crd rbac:roleName=teardown-operator paths=./api/... paths=./engine/... paths=./steps/... \
		output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac

.PHONY: verify-generated
verify-generated: $(CONTROLLER_GEN) ## Fail when committed generated files differ from what the markers produce.
	tmp=$$(mktemp -d); trap 'rm -rf $$tmp' EXIT; \
	$(CONTROLLER_GEN) object:headerFile=/dev/null paths=./api/... output:object:dir=$$tmp/api >/dev/null; \
	$(CONTROLLER_GEN) crd rbac:roleName=teardown-operator paths=./api/... paths=./engine/... paths=./steps/... \
		output:crd:artifacts:config=$$tmp/crd output:rbac:artifacts:config=$$tmp/rbac; \
	diff -u api/v1alpha1/zz_generated.deepcopy.go $$tmp/api/zz_generated.deepcopy.go && \
	diff -ru config/crd/bases $$tmp/crd && diff -u config/rbac/role.yaml $$tmp/rbac/role.yaml || \
	{ echo "generated files are stale: run 'make generate manifests' and commit the result" >&2; exit 1; }

##@ Tools and the local cluster

$(CONTROLLER_GEN):
	GOBIN=$(BIN) $(GO) install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_GEN_VERSION)
$(STATICCHECK):
	GOBIN=$(BIN) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
$(GINKGO):
	GOBIN=$(BIN) $(GO) install github.com/onsi/ginkgo/v2/ginkgo@$(GINKGO_VERSION)

.PHONY: tools
tools: $(CONTROLLER_GEN) $(STATICCHECK) $(GINKGO) ## Install the Go tools into bin/.

.PHONY: control-plane
control-plane: ## Build etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kwok and kwokctl into bin/ (once).
	bash test/cluster/build-control-plane.sh

.PHONY: cluster-up
cluster-up: control-plane ## Start the local kwok cluster; prints its kubeconfig path.
	bash test/cluster/up.sh

.PHONY: cluster-down
cluster-down: ## Stop the local kwok cluster.
	bash test/cluster/down.sh

##@ Test

.PHONY: lint
lint: $(STATICCHECK) ## gofmt, go vet and staticcheck.
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './bin/*')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(STATICCHECK) ./...

.PHONY: test-unit
test-unit: ## Unit tests (no API server).
	$(GO) test ./api/... ./internal/... ./engine/... ./steps/... ./cli/... ./cmd/...

.PHONY: test-integration
test-integration: control-plane $(GINKGO) ## Integration suites against a real API server (envtest).
	$(GINKGO) -v --timeout=20m ./test/integration

.PHONY: test-e2e
test-e2e: control-plane $(GINKGO) ## End-to-end suite on the local kwok cluster (starts and stops it).
	$(GINKGO) -v --timeout=20m ./test/e2e

.PHONY: test
test: verify-generated lint test-unit test-integration test-e2e ## Everything a change must pass.

.PHONY: bench
bench: control-plane build ## Teardown benchmark, side by side: raw floor, hand-written controller, operator with runHistory Always and OnFailure (N=1000 targets by default).
	$(GO) run ./test/bench -n $${N:-1000}

##@ Demo

.PHONY: demo
demo: control-plane build plugin ## Start a cluster, install, delete a protected object and watch its teardown.
	bash test/demo/demo.sh
