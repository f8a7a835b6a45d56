#!/usr/bin/env bash
# Proves the cluster started by up.sh does what the e2e tests rely on. Prints PASS/FAIL per check and
# exits non-zero if any check failed.
#
# Env: KUBECONFIG (default: the path up.sh writes for CLUSTER_NAME), CLUSTER_NAME (default teardown),
#      BIN_DIR (default <repo>/bin), KWOK_WORKDIR (default $BIN_DIR/kwok-state)
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
BIN_DIR=${BIN_DIR:-$root/bin}
CLUSTER_NAME=${CLUSTER_NAME:-teardown}
KWOK_WORKDIR=${KWOK_WORKDIR:-$BIN_DIR/kwok-state}
export KUBECONFIG=${KUBECONFIG:-$KWOK_WORKDIR/$CLUSTER_NAME/kubeconfig}
export KUBECACHEDIR=${KUBECACHEDIR:-$KWOK_WORKDIR/$CLUSTER_NAME/kube-cache} # not ~/.kube/cache
kubectl() { "$BIN_DIR/kubectl" "$@"; }

ns=smoke-$(date +%s)-$$
failures=0
pass() { printf 'PASS %s (%s)\n' "$1" "$2"; }
fail() { printf 'FAIL %s: %s\n' "$1" "$2"; failures=$((failures + 1)); }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# poll <timeout-seconds> <command...>: succeed as soon as the command succeeds.
poll() {
  local end=$(($(date +%s) + $1))
  shift
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$end" ] || return 1
    sleep 0.5
  done
}
absent() { # absent <kubectl get args...>: the object does not exist (NotFound, not some other error)
  local out
  if out=$(kubectl "$@" 2>&1); then return 1; fi
  [[ $out == *NotFound* ]]
}
job_condition() { # job_condition <job> <type>
  [ "$(kubectl -n "$ns" get job "$1" -o jsonpath="{.status.conditions[?(@.type==\"$2\")].status}")" = True ]
}

cleanup() {
  kubectl delete namespace "$ns" smoke-ns-"$ns" --ignore-not-found --wait=false >/dev/null 2>&1 || true
}
trap cleanup EXIT

if ! kubectl get --raw /readyz >/dev/null 2>&1; then
  echo "FAIL cluster reachable: kubectl get --raw /readyz failed (KUBECONFIG=$KUBECONFIG)"
  exit 1
fi
kubectl create namespace "$ns" >/dev/null
poll 30 kubectl -n "$ns" get serviceaccount default || echo "warning: no default serviceaccount in $ns" >&2

job() { # job <name> <extra pod annotations yaml>
  cat <<EOF
apiVersion: batch/v1
kind: Job
metadata:
  name: $1
  namespace: $ns
spec:
  backoffLimit: 0
  template:
    metadata:
      annotations: {$2}
    spec:
      restartPolicy: Never
      containers:
      - name: main
        image: busybox:latest
        command: ["true"]
EOF
}

# (a) a Job with one pod completes.
t=$(now)
job job-ok '' | kubectl apply -f - >/dev/null
if poll 60 job_condition job-ok Complete; then
  pass "a: Job reaches Complete" "$(since "$t")s"
else
  fail "a: Job reaches Complete" "not Complete within 60s: $(kubectl -n "$ns" get job job-ok -o jsonpath='{.status}' 2>&1)"
fi

# (b) a Job whose pod carries the fail annotation fails.
t=$(now)
job job-fail '"teardown.dev/kwok-fail": "true"' | kubectl apply -f - >/dev/null
if poll 60 job_condition job-fail Failed; then
  code=$(kubectl -n "$ns" get pods -l batch.kubernetes.io/job-name=job-fail \
    -o jsonpath='{.items[0].status.phase}/{.items[0].status.containerStatuses[0].state.terminated.exitCode}')
  if [ "$code" = Failed/1 ]; then
    pass "b: Job with teardown.dev/kwok-fail pod reaches Failed" "$(since "$t")s"
  else
    fail "b: Job with teardown.dev/kwok-fail pod reaches Failed" "Job Failed but pod phase/exitCode is '$code', want Failed/1"
  fi
else
  fail "b: Job with teardown.dev/kwok-fail pod reaches Failed" "not Failed within 60s: $(kubectl -n "$ns" get job job-fail -o jsonpath='{.status}' 2>&1)"
fi

# (c) garbage collection of a dependent whose owner was deleted.
t=$(now)
kubectl -n "$ns" create configmap gc-owner >/dev/null
owner_uid=$(kubectl -n "$ns" get configmap gc-owner -o jsonpath='{.metadata.uid}')
kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: ConfigMap
metadata:
  name: gc-dependent
  namespace: $ns
  ownerReferences:
  - apiVersion: v1
    kind: ConfigMap
    name: gc-owner
    uid: $owner_uid
EOF
kubectl -n "$ns" delete configmap gc-owner >/dev/null
if poll 60 absent -n "$ns" get configmap gc-dependent; then
  pass "c: garbage collector deletes dependent of deleted owner" "$(since "$t")s"
else
  fail "c: garbage collector deletes dependent of deleted owner" "gc-dependent still exists after 60s"
fi

# (d) namespace deletion waits for a finalizer on a ConfigMap inside it.
t=$(now)
fns=smoke-ns-$ns
kubectl create namespace "$fns" >/dev/null
kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: ConfigMap
metadata:
  name: held
  namespace: $fns
  finalizers:
  - teardown.dev/smoke-test
EOF
kubectl delete namespace "$fns" --wait=false >/dev/null
ns_phase() { [ "$(kubectl get namespace "$fns" -o jsonpath='{.status.phase}')" = "$1" ]; }
cm_deleting() { [ -n "$(kubectl -n "$fns" get configmap held -o jsonpath='{.metadata.deletionTimestamp}')" ]; }
if ! poll 30 ns_phase Terminating; then
  fail "d: namespace deletion waits for finalizer" "namespace never became Terminating"
elif ! poll 60 cm_deleting; then
  fail "d: namespace deletion waits for finalizer" "namespace controller never deleted configmap held"
else
  sleep 5 # the namespace must still be there while the finalizer is present
  if ! ns_phase Terminating; then
    fail "d: namespace deletion waits for finalizer" "namespace went away while the finalizer was still present"
  else
    kubectl -n "$fns" patch configmap held --type=merge -p '{"metadata":{"finalizers":null}}' >/dev/null
    t2=$(now)
    if poll 90 absent get namespace "$fns"; then
      pass "d: namespace deletion waits for finalizer, then completes" "$(since "$t")s total; namespace gone $(since "$t2")s after the finalizer was removed"
    else
      fail "d: namespace deletion waits for finalizer" "namespace still present 90s after the finalizer was removed"
    fi
  fi
fi

# (e) foreground deletion: the owner stays (deletionTimestamp + foregroundDeletion finalizer) while its
# blockOwnerDeletion dependent exists, and goes away once the dependent is gone. The dependent carries
# a finalizer so the "owner still waiting" state can be observed deterministically.
t=$(now)
kubectl -n "$ns" create configmap fg-owner >/dev/null
owner_uid=$(kubectl -n "$ns" get configmap fg-owner -o jsonpath='{.metadata.uid}')
kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: ConfigMap
metadata:
  name: fg-dependent
  namespace: $ns
  finalizers:
  - teardown.dev/smoke-test
  ownerReferences:
  - apiVersion: v1
    kind: ConfigMap
    name: fg-owner
    uid: $owner_uid
    blockOwnerDeletion: true
EOF
kubectl -n "$ns" delete configmap fg-owner --cascade=foreground --wait=false >/dev/null
dep_deleting() { [ -n "$(kubectl -n "$ns" get configmap fg-dependent -o jsonpath='{.metadata.deletionTimestamp}')" ]; }
owner_fg() { [[ $(kubectl -n "$ns" get configmap fg-owner -o jsonpath='{.metadata.finalizers}') == *foregroundDeletion* ]]; }
if ! poll 60 dep_deleting; then
  fail "e: foreground deletion" "garbage collector never deleted the dependent fg-dependent"
elif ! owner_fg; then
  fail "e: foreground deletion" "fg-owner not held by foregroundDeletion while its dependent exists ($(kubectl -n "$ns" get configmap fg-owner -o jsonpath='{.metadata}' 2>&1))"
else
  sleep 3
  if ! owner_fg; then
    fail "e: foreground deletion" "fg-owner went away while its blocking dependent still existed"
  else
    kubectl -n "$ns" patch configmap fg-dependent --type=merge -p '{"metadata":{"finalizers":null}}' >/dev/null
    t2=$(now)
    if poll 60 absent -n "$ns" get configmap fg-owner && absent -n "$ns" get configmap fg-dependent; then
      pass "e: Foreground-deleted owner waits for its dependent, then goes away" "$(since "$t")s total; owner gone $(since "$t2")s after the dependent was released"
    else
      fail "e: foreground deletion" "fg-owner still exists 60s after its dependent was released"
    fi
  fi
fi

if [ "$failures" -ne 0 ]; then
  echo "smoke: $failures check(s) failed"
  exit 1
fi
echo "smoke: all checks passed"
