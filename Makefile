# teardown-operator. `make help` lists the targets.
SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

ROOT := $(abspath .)
BIN := $(ROOT)/bin
export PATH := $(BIN):$(PATH)
GO ?= go
# How the operator is built for release: the same flags as the Dockerfile's.
RELEASE_BUILD_FLAGS := -trimpath -ldflags "-s -w"

CONTROLLER_GEN_VERSION ?= v0.23.0
STATICCHECK_VERSION ?= v0.8.2
GINKGO_VERSION ?= v2.34.0
HELM_VERSION ?= v3.22.0

# The image, tagged with the release: the Helm chart's appVersion, its default image tag.
IMAGE ?= ghcr.io/teardown-dev/teardown-operator
APP_VERSION := $(shell sed -n 's/^appVersion: *"*\([^"]*\)"*$$/\1/p' charts/teardown-operator/Chart.yaml)

CONTROLLER_GEN := $(BIN)/controller-gen
STATICCHECK := $(BIN)/staticcheck
GINKGO := $(BIN)/ginkgo
HELM := $(BIN)/helm
CONTROL_PLANE := $(BIN)/kube-apiserver $(BIN)/etcd $(BIN)/kwokctl

# envtest finds etcd and kube-apiserver here, built from source by `make control-plane`.
export KUBEBUILDER_ASSETS := $(BIN)

.PHONY: help
help: ## Show this help.
	@grep -hE '^[a-z][a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-20s %s\n", $$1, $$2}'

##@ Build

.PHONY: build
build: ## Build the operator into bin/, as the image does (static, no symbol table or DWARF: what the benchmarks measure).
	CGO_ENABLED=0 $(GO) build $(RELEASE_BUILD_FLAGS) -o $(BIN)/teardown-operator ./cmd/teardown-operator

.PHONY: plugin
plugin: ## Build the kubectl plugin, kubectl-teardown, and its completion helper into bin/ (put bin/ on PATH: kubectl teardown).
	$(GO) build -ldflags "-X github.com/teardown-dev/teardown-operator/cli.Version=$(APP_VERSION)" -o $(BIN)/kubectl-teardown ./cmd/kubectl-teardown
	install -m 0755 plugins/kubectl_complete-teardown $(BIN)/kubectl_complete-teardown

.PHONY: plugin-archives
plugin-archives: ## Build kubectl-teardown for linux and darwin (amd64, arm64) and the krew manifest into bin/plugin/.
	bash plugins/archives.sh

.PHONY: image
image: ## Build the operator image (linux/amd64 and arm64, no Docker daemon) into bin/image/: a docker-loadable tarball and an OCI layout.
	GO=$(GO) $(GO) run ./hack/image -tag $(IMAGE):$(APP_VERSION)

.PHONY: test-image
test-image: image ## Check the image in bin/image/: its config, files, static binaries and that they run.
	$(GO) test -count=1 ./test/image/...

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate deepcopy code from the API markers.
	$(CONTROLLER_GEN) object paths=./api/...

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Generate CRDs and RBAC from the markers, and the chart's copies of them.
	$(CONTROLLER_GEN) crd rbac:roleName=teardown-operator paths=./api/... paths=./engine/... paths=./steps/... paths=./internal/metricsauth \
		output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac
	$(GO) run ./hack/chartgen

.PHONY: chart
chart: ## Generate the Helm chart's CRD and ClusterRole templates from config/ (make manifests does it too).
	$(GO) run ./hack/chartgen

.PHONY: builtin-kinds
builtin-kinds: control-plane ## Write the built-in kinds lint knows offline (cli/discovery/builtin_kinds.json) from the control plane's API server.
	KUBEBUILDER_ASSETS=$(BIN) $(GO) run ./hack/builtinkinds

.PHONY: verify-generated
verify-generated: $(CONTROLLER_GEN) ## Fail when committed generated files differ from what the markers produce.
	tmp=$$(mktemp -d); trap 'rm -rf $$tmp' EXIT; \
	$(CONTROLLER_GEN) object:headerFile=/dev/null paths=./api/... output:object:dir=$$tmp/api >/dev/null; \
	$(CONTROLLER_GEN) crd rbac:roleName=teardown-operator paths=./api/... paths=./engine/... paths=./steps/... paths=./internal/metricsauth \
		output:crd:artifacts:config=$$tmp/crd output:rbac:artifacts:config=$$tmp/rbac; \
	$(GO) run ./hack/chartgen -out $$tmp/chart; \
	diff -u api/v1alpha1/zz_generated.deepcopy.go $$tmp/api/zz_generated.deepcopy.go && \
	diff -ru config/crd/bases $$tmp/crd && diff -u config/rbac/role.yaml $$tmp/rbac/role.yaml && \
	diff -ru charts/teardown-operator/templates/crds $$tmp/chart/crds && \
	diff -u charts/teardown-operator/templates/clusterrole.yaml $$tmp/chart/clusterrole.yaml && \
	diff -u charts/teardown-operator/templates/user-roles.yaml $$tmp/chart/user-roles.yaml && \
	diff -u charts/teardown-operator/templates/resource-steps-role.yaml $$tmp/chart/resource-steps-role.yaml && \
	diff -u charts/teardown-operator/templates/deletion-guard.yaml $$tmp/chart/deletion-guard.yaml && \
	diff -u charts/teardown-operator/templates/approvals.yaml $$tmp/chart/approvals.yaml && \
	diff -u charts/teardown-operator/templates/requests.yaml $$tmp/chart/requests.yaml && \
	diff -u charts/teardown-operator/templates/marks.yaml $$tmp/chart/marks.yaml || \
	{ echo "generated files are stale: run 'make generate manifests' and commit the result" >&2; exit 1; }

##@ Tools and the local cluster

$(CONTROLLER_GEN):
	GOBIN=$(BIN) $(GO) install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_GEN_VERSION)
$(STATICCHECK):
	GOBIN=$(BIN) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
$(GINKGO):
	GOBIN=$(BIN) $(GO) install github.com/onsi/ginkgo/v2/ginkgo@$(GINKGO_VERSION)
# The -X flags are what Helm's own release build sets: its version, and the Kubernetes version that
# helm template and helm lint assume without a cluster (the local cluster's; else 1.20, which the
# chart's kubeVersion refuses).
HELM_LDFLAGS := -X helm.sh/helm/v3/internal/version.version=$(HELM_VERSION) \
	-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=36 \
	-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=36
$(HELM):
	GOBIN=$(BIN) $(GO) install -ldflags '$(HELM_LDFLAGS)' helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

.PHONY: tools
tools: $(CONTROLLER_GEN) $(STATICCHECK) $(GINKGO) $(HELM) ## Install the Go tools (controller-gen, staticcheck, ginkgo, helm) into bin/.

.PHONY: control-plane
control-plane: ## Build etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kwok and kwokctl into bin/ (once).
	bash test/cluster/build-control-plane.sh

# REAL_NODE=1 makes cluster-up and cluster-down start and remove the cluster with a real node.
ifeq ($(REAL_NODE),1)
.PHONY: cluster-up
cluster-up: node-up

.PHONY: cluster-down
cluster-down: node-down
else
.PHONY: cluster-up
cluster-up: control-plane ## Start the local kwok cluster (REAL_NODE=1: with a real node, as node-up); prints its kubeconfig path.
	bash test/cluster/up.sh

.PHONY: cluster-down
cluster-down: ## Stop the local kwok cluster (REAL_NODE=1: and its real node, as node-down).
	bash test/cluster/down.sh
endif

# The Debian packages a real node runs on: containerd, runc, the CNI plugins, and what node-up.sh
# and hack/nodeimages use (iptables, iproute2, openssl, a static busybox for the test image), and
# curl, which the real-node suite runs as docs/operating.md does.
NODE_PACKAGES := containerd runc containernetworking-plugins iptables iproute2 openssl busybox-static curl

.PHONY: node-deps
node-deps: ## Install the real node's Debian packages (containerd, runc, CNI plugins, ...) when missing; needs root.
	@missing=""; for p in $(NODE_PACKAGES); do \
		dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q ' installed$$' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
		echo "installing$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

.PHONY: node-bins
node-bins: ## Build the kubelet (with the control plane) into bin/ (once).
	WITH_KUBELET=1 bash test/cluster/build-control-plane.sh

.PHONY: node-images
node-images: ## Build the images the real node cannot pull (pause, and busybox for Job steps) into bin/node-images/.
	$(GO) run ./hack/nodeimages -out $(BIN)/node-images

.PHONY: node-up
node-up: node-deps node-bins node-images image ## Start the local cluster with a real node (kubelet, containerd) beside the kwok node; prints its kubeconfig path. Needs root.
	bash test/cluster/node-up.sh

.PHONY: node-down
node-down: ## Remove the real node, its cluster and everything they added to the host (also after a failed node-up).
	bash test/cluster/node-down.sh

##@ Test

.PHONY: lint
lint: $(STATICCHECK) ## gofmt, go vet and staticcheck.
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './bin/*')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(STATICCHECK) ./...
	$(GO) vet -tags faultinject ./internal/faultinject/... ./cmd/... ./steps/httpstep/...
	$(STATICCHECK) -tags faultinject ./internal/faultinject/...

.PHONY: test-unit
test-unit: ## Unit tests (no API server).
	$(GO) test ./api/... ./internal/... ./engine/... ./steps/... ./cli/... ./cmd/... ./test/docs/...
	$(GO) test -tags faultinject ./internal/faultinject/...

.PHONY: test-integration
test-integration: control-plane $(GINKGO) ## Integration suites against a real API server (envtest).
	$(GINKGO) -v --timeout=20m ./test/integration

.PHONY: test-e2e
test-e2e: control-plane $(GINKGO) $(HELM) image ## End-to-end suite on the local kwok cluster (starts and stops it).
	$(GINKGO) -v --timeout=20m ./test/e2e

.PHONY: test-realnode
test-realnode: node-deps node-bins node-images image $(GINKGO) $(HELM) ## The real-node suite: the chart, its probes, Job steps, a helm upgrade to the previous release and back with teardowns in flight, and the uninstall hook as real containers (starts and removes the node).
	$(GINKGO) -v --timeout=15m ./test/realnode

.PHONY: test-chart
test-chart: control-plane $(HELM) ## The Helm chart: helm lint, helm template with default and full values, the values schema.
	HELM=$(HELM) $(GO) test -count=1 ./test/chart/...

# The small sizes make test runs; make chaos and make soak run the sizes docs/reliability.md reports.
CHAOS_SMALL = CHAOS_OBJECTS=30 CHAOS_KILLS=3 CHAOS_FAILOVER_OBJECTS=20 CHAOS_FAILOVER_KILLS=2 \
	CHAOS_PAUSE_OBJECTS=20 CHAOS_CONTROL_PLANE_OBJECTS=45 SOAK_DURATION=60s CRASHPOINT_SAMPLE=2 WATCHFAULT_PLANS=3 INFLIGHT_SEQUENCES=2

.PHONY: test-chaos
test-chaos: control-plane $(GINKGO) ## The chaos and soak suite, small: SIGKILLs, failover, a paused leader, API server and etcd faults, 2 crash points a trigger (CRASHPOINT_SEED), 3 watch-fault plans (WATCHFAULT_SEED), 2 sequences of changes in flight (INFLIGHT_SEED), a restart served the past, an unsafe deletion, an upgrade and a downgrade, 60s of churn.
	$(CHAOS_SMALL) $(GINKGO) -v --timeout=20m ./test/chaos

.PHONY: chaos
chaos: control-plane $(GINKGO) ## The chaos suite at full size (200 objects and 20 SIGKILLs, 10 failovers, every crash point, 30 watch-fault plans, a restart served the past, 20 sequences of changes in flight, an upgrade and a downgrade, ...); figures in docs/reliability.md.
	$(GINKGO) -v --timeout=60m --skip=Soak ./test/chaos

.PHONY: soak
soak: control-plane $(GINKGO) ## 30 minutes of churn (SOAK_DURATION, SOAK_RATE): memory, goroutines, queue depth, p99; figures in docs/reliability.md.
	SOAK_DURATION=$${SOAK_DURATION:-30m} $(GINKGO) -v --timeout=90m --focus=Soak ./test/chaos

.PHONY: test
test: verify-generated lint test-unit test-chart test-image test-integration test-e2e test-realnode test-chaos ## Everything a change must pass.

# The fuzz targets, as name:package. make test runs their seed corpora (test-unit).
FUZZ_TARGETS := FuzzCompilePolicy:./engine/policy FuzzLint:./cli/lint FuzzExpr:./internal/expr FuzzTemplate:./internal/expr \
	FuzzJobTemplate:./steps/jobstep FuzzResourceStep:./steps/resource FuzzResponse:./steps/httpstep FuzzRawResponse:./steps/httpstep

.PHONY: fuzz
fuzz: ## Fuzz policies, CEL, ${} templates, job templates and http responses, each for FUZZTIME (60s; FUZZFLAGS=-parallel=1).
	for t in $(FUZZ_TARGETS); do \
		$(GO) test -run='^$$' -fuzz="^$${t%%:*}$$" -fuzztime=$${FUZZTIME:-60s} $${FUZZFLAGS:-} $${t#*:} || exit 1; \
	done

.PHONY: bench
bench: control-plane build ## Teardown benchmark, side by side: raw floor, hand-written controller, operator at its defaults and with runHistory All (N=1000 targets by default).
	$(GO) run ./test/bench -n $${N:-1000}

.PHONY: bench-scale
bench-scale: control-plane build ## Teardown benchmark at scale, peer and operator: 100,000 targets in 100 namespaces (one ClusterTeardownPolicy), 10,000 of them deleted; memory per protected object.
	$(GO) run ./test/bench -n 100000 -namespaces 100 -delete 10000 -contenders peer,operator

.PHONY: bench-resource
bench-resource: control-plane build ## Teardown benchmark of a resource step (a create as a ServiceAccount), peer, operator, and the same as a job step; 3 rounds.
	$(GO) run ./test/bench -n $${N:-1000} -step resource -rounds 3 -contenders peer,operator,operator-job

.PHONY: bench-arming
bench-arming: control-plane build ## Arming benchmark: 1,000 new objects armed at creation by the admission policy (operator), after it (operator-late), and by the hand-written peer, with each create's latency; 3 rounds.
	$(GO) run ./test/bench -n $${N:-1000} -rounds 3 -contenders peer,operator,operator-late

.PHONY: bench-namespace
bench-namespace: control-plane build ## Teardown benchmark of a namespace deletion, peer and operator: 10,000 targets, their namespace deleted.
	$(GO) run ./test/bench -n 10000 -namespace -contenders peer,operator

##@ Demo

.PHONY: demo
demo: control-plane build plugin ## Start a cluster, install, delete a protected object and watch its teardown.
	bash test/demo/demo.sh
