#!/usr/bin/env bash
# teardown-operator demo (`make demo`): starts a local kwok cluster, installs the CRDs, runs the
# operator from bin/, protects a ConfigMap with samples/configmap-grace.yaml, deletes it and shows
# its teardown advancing step by step (two waits and a Job), then stops the operator and deletes
# the cluster.
#
# Needs what `make control-plane build` puts in bin/ (kubectl, kwokctl, the control plane and
# bin/teardown-operator). No Docker, no network.
#
# Env:
#   CLUSTER_NAME    local cluster name (default: teardown-demo; never the e2e cluster "teardown")
#   DEMO_NAMESPACE  namespace for the policy and its target (default: teardown-demo)
#   DEMO_TIMEOUT    seconds each wait may take before the demo fails (default: 60)
#   DEMO_KEEP=1     leave the cluster and the operator running at the end, to explore
#   BIN_DIR         directory of the binaries (default: <repo>/bin)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
BIN_DIR=${BIN_DIR:-$root/bin}
BIN_DIR=$(cd "$BIN_DIR" && pwd)
export BIN_DIR
export CLUSTER_NAME=${CLUSTER_NAME:-teardown-demo}
export KWOK_WORKDIR=${KWOK_WORKDIR:-$BIN_DIR/kwok-state}
NS=${DEMO_NAMESPACE:-teardown-demo}
TIMEOUT=${DEMO_TIMEOUT:-60}
KEEP=${DEMO_KEEP:-}
RUN_NS=teardown-system
POLICY=configmap-grace
TARGET=settings
OPERATOR_LOG=$BIN_DIR/$CLUSTER_NAME-operator.log
CLUSTER_LOG=$BIN_DIR/$CLUSTER_NAME-cluster.log
OPERATOR_PIDFILE=$BIN_DIR/$CLUSTER_NAME-operator.pid
# kubectl finds the plugin, kubectl-teardown, on PATH: `kubectl teardown ...`.
export PATH=$BIN_DIR:$PATH
# kubectl's discovery cache goes with the cluster state (deleted with it), not to ~/.kube.
export KUBECACHEDIR=$KWOK_WORKDIR/$CLUSTER_NAME/kube-cache

if [ -t 1 ]; then
  bold=$'\e[1m' dim=$'\e[2m' red=$'\e[31m' green=$'\e[32m' reset=$'\e[0m'
else
  bold='' dim='' red='' green='' reset=''
fi
t0=$(date +%s)
say() { printf '\n%s==> %s%s\n' "$bold" "$*" "$reset"; }
note() { printf '    %s\n' "$*"; }
die() {
  printf '\n%sDEMO FAILED: %s%s\n' "$red" "$*" "$reset" >&2
  if [ -s "$OPERATOR_LOG" ]; then
    printf 'Last lines of the operator log (%s):\n' "$OPERATOR_LOG" >&2
    tail -n 15 "$OPERATOR_LOG" >&2
  fi
  exit 1
}
kubectl() { "$BIN_DIR/kubectl" --kubeconfig "$KUBECONFIG" "$@"; }
# show runs a command after printing it, as a person would type it.
show() {
  printf '%s$ %s%s\n' "$dim" "$*" "$reset"
  "$@"
}
operator_alive() { [ -n "${op_pid:-}" ] && kill -0 "$op_pid" 2>/dev/null; }
# wait_until <what> <command...>: runs command every half second until it succeeds, for at most
# $TIMEOUT seconds; fails the demo with a message naming <what> otherwise.
wait_until() {
  local what=$1 deadline=$(($(date +%s) + TIMEOUT))
  shift
  until "$@" >/dev/null 2>&1; do
    if [ -n "${op_pid:-}" ] && ! operator_alive; then
      die "the operator exited while waiting for $what"
    fi
    [ "$(date +%s)" -lt "$deadline" ] || die "timed out after ${TIMEOUT}s waiting for $what"
    sleep 0.5
  done
}

for b in kubectl kwokctl kube-apiserver etcd; do
  [ -x "$BIN_DIR/$b" ] || die "$BIN_DIR/$b is missing: run 'make control-plane' first (or 'make demo')"
done
[ -x "$BIN_DIR/teardown-operator" ] || die "$BIN_DIR/teardown-operator is missing: run 'make build' first (or 'make demo')"
[ -x "$BIN_DIR/kubectl-teardown" ] || die "$BIN_DIR/kubectl-teardown is missing: run 'make plugin' first (or 'make demo')"
case $CLUSTER_NAME in
  teardown) die "CLUSTER_NAME=teardown is the e2e tests' cluster; the demo deletes its cluster at the end, pick another name" ;;
esac

op_pid=
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  set +e
  if [ -n "$KEEP" ] && [ "$rc" -eq 0 ]; then
    say "Leaving the cluster and the operator running (DEMO_KEEP=1)"
    note "export KUBECONFIG=$KUBECONFIG"
    note "operator: pid $op_pid, log $OPERATOR_LOG"
    note "stop it all: kill $op_pid; CLUSTER_NAME=$CLUSTER_NAME bash test/cluster/down.sh"
    return
  fi
  say "Cleaning up"
  if operator_alive; then
    note "stopping the operator (pid $op_pid)"
    kill "$op_pid" 2>/dev/null
    for _ in $(seq 1 20); do operator_alive || break; sleep 0.5; done
    if operator_alive; then
      kill -KILL "$op_pid" 2>/dev/null
    fi
    wait "$op_pid" 2>/dev/null
  fi
  rm -f "$OPERATOR_PIDFILE"
  note "deleting cluster $CLUSTER_NAME"
  bash "$root/test/cluster/down.sh" >>"$CLUSTER_LOG" 2>&1 || note "down.sh failed; see $CLUSTER_LOG"
  note "operator log kept at $OPERATOR_LOG"
  if [ "$rc" -eq 0 ]; then
    printf '\n%sDemo finished in %ss.%s\n' "$green" "$(($(date +%s) - t0))" "$reset"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'printf "\ninterrupted\n" >&2; exit 130' INT TERM

printf '%steardown-operator demo%s: a TeardownPolicy holds a ConfigMap'"'"'s deletion while its steps run.\n' "$bold" "$reset"

# ---------------------------------------------------------------------------------------------
say "Starting a local cluster ($CLUSTER_NAME): kwok, no containers"
: >"$CLUSTER_LOG"
# An operator left running by an earlier DEMO_KEEP=1 run: stop it, if that pid still is it.
if old=$(cat "$OPERATOR_PIDFILE" 2>/dev/null) && [ -n "$old" ] &&
  tr '\0' ' ' <"/proc/$old/cmdline" 2>/dev/null | grep -q "teardown-operator --kubeconfig $KWOK_WORKDIR/$CLUSTER_NAME/kubeconfig"; then
  note "stopping the operator left by an earlier run (pid $old)"
  kill "$old" 2>/dev/null || true
fi
rm -f "$OPERATOR_PIDFILE"
if [ -d "$KWOK_WORKDIR/clusters/$CLUSTER_NAME" ]; then
  note "removing the cluster left by an earlier run"
  bash "$root/test/cluster/down.sh" >>"$CLUSTER_LOG" 2>&1 || die "could not delete the old cluster; see $CLUSTER_LOG"
fi
# up.sh bounds its own wait (UP_TIMEOUT, 180s) and prints only the kubeconfig path on stdout.
KUBECONFIG=$(bash "$root/test/cluster/up.sh" 2>>"$CLUSTER_LOG") || {
  tail -n 20 "$CLUSTER_LOG" >&2
  die "the cluster did not start; full log: $CLUSTER_LOG"
}
export KUBECONFIG
note "ready in $(($(date +%s) - t0))s (cluster log: $CLUSTER_LOG)"
note "to follow along in another terminal: export KUBECONFIG=$KUBECONFIG PATH=$BIN_DIR:\$PATH"

# ---------------------------------------------------------------------------------------------
say "Installing the CRDs"
show kubectl apply -f "$root/config/crd/bases"
show kubectl wait --for=condition=Established --timeout="${TIMEOUT}s" \
  crd/teardownpolicies.teardown.dev crd/clusterteardownpolicies.teardown.dev crd/teardownruns.teardown.dev ||
  die "the CRDs did not become Established"

# ---------------------------------------------------------------------------------------------
say "Starting the operator"
show kubectl create namespace "$RUN_NS"
printf '%s$ %s%s\n' "$dim" "teardown-operator --kubeconfig \$KUBECONFIG --run-namespace $RUN_NS --metrics-bind-address 127.0.0.1:0 --health-probe-bind-address 127.0.0.1:0 &" "$reset"
# In a session of its own (setsid), so that Ctrl-C reaches only this script, whose cleanup then
# stops the operator and the cluster in order.
detach=()
if command -v setsid >/dev/null; then detach=(setsid); fi
"${detach[@]}" "$BIN_DIR/teardown-operator" --kubeconfig "$KUBECONFIG" --run-namespace "$RUN_NS" \
  --metrics-bind-address 127.0.0.1:0 --health-probe-bind-address 127.0.0.1:0 \
  </dev/null >"$OPERATOR_LOG" 2>&1 &
op_pid=$!
echo "$op_pid" >"$OPERATOR_PIDFILE"
note "pid $op_pid, log: $OPERATOR_LOG"
leader() {
  [ -n "$(kubectl get lease -n "$RUN_NS" teardown-operator.teardown.dev -o jsonpath='{.spec.holderIdentity}')" ]
}
wait_until "the operator to take its leader-election lease (log: $OPERATOR_LOG)" leader
note "running; it holds the lease $RUN_NS/teardown-operator.teardown.dev"

# ---------------------------------------------------------------------------------------------
say "Applying samples/$POLICY.yaml in namespace $NS"
# The sample's own header says what it does: print that part of it.
awk '/^# What it does/ { on = 1 } /^# Every step/ { exit } on { sub(/^#/, "   "); print }' "$root/samples/$POLICY.yaml"
show kubectl create namespace "$NS"
show kubectl apply -n "$NS" -f "$root/samples/$POLICY.yaml"
wait_until "TeardownPolicy $POLICY to report Ready=True" \
  kubectl wait -n "$NS" --for=condition=Ready "teardownpolicy/$POLICY" --timeout=2s

# ---------------------------------------------------------------------------------------------
say "Creating the target: ConfigMap $TARGET, labelled teardown.dev/sample=grace and tier=prod"
printf '%s$ kubectl create -n %s -f -%s\n' "$dim" "$NS" "$reset"
manifest="apiVersion: v1
kind: ConfigMap
metadata:
  name: $TARGET
  labels:
    teardown.dev/sample: grace
    tier: prod
data:
  greeting: hello"
printf '%s\n' "$manifest" | sed 's/^/    /'
printf '%s\n' "$manifest" | kubectl create -n "$NS" -f -
protected() {
  [ "$(kubectl get -n "$NS" teardownpolicy "$POLICY" -o jsonpath='{.status.protected}')" = 1 ] &&
    kubectl get -n "$NS" configmap "$TARGET" -o jsonpath='{.metadata.finalizers}' | grep -q "teardownpolicy.teardown.dev/$POLICY"
}
wait_until "the operator to protect ConfigMap $TARGET (finalizer, and Protected 1 in the policy status)" protected
note "The policy is Ready and protects one object:"
show kubectl get teardownpolicy -n "$NS"
note "The operator put the policy's finalizer on the ConfigMap, so Kubernetes cannot delete it yet:"
show kubectl get configmap "$TARGET" -n "$NS" -o custom-columns=NAME:.metadata.name,FINALIZERS:.metadata.finalizers

# ---------------------------------------------------------------------------------------------
say "Planning the deletion: what would run, evaluated now, with nothing sent or created"
show "$BIN_DIR/kubectl" teardown plan "configmap/$TARGET" -n "$NS"

# ---------------------------------------------------------------------------------------------
say "Deleting the ConfigMap"
deleted_at=$(date +%s.%N)
show kubectl delete configmap "$TARGET" -n "$NS" --wait=false
note "Kubernetes marks it Terminating; the operator starts a TeardownRun and works through the steps."
note "Each line below is a change seen by polling 'kubectl get teardownruns -n $NS'"
note "(times are since the delete command was issued):"
echo

# Poll the run and print a line whenever its phase, current step or any step's phase changes.
run_state() {
  kubectl get teardownruns -n "$NS" -o jsonpath='{range .items[*]}{.metadata.name}{"|"}{.status.phase}{"|"}{.status.currentStep}{"|"}{range .status.steps[*]}{.name}={.phase} {end}{"\n"}{end}' 2>/dev/null
}
deadline=$(($(date +%s) + TIMEOUT))
last='' phase='' run='' shown='no TeardownRun yet'
while :; do
  line=$(run_state | head -n 1) || true
  if [ -n "$line" ] && [ "$line" != "$last" ]; then
    last=$line
    IFS='|' read -r run phase step steps <<<"$line"
    elapsed=$(awk -v a="$deleted_at" -v b="$(date +%s.%N)" 'BEGIN { printf "+%.1fs", b - a }')
    shown=$(printf '%s  phase=%-9s step=%-8s  %s' "$run" "${phase:-Pending}" "${step:--}" "${steps% }")
    printf '  %7s  %s\n' "$elapsed" "$shown"
    if [ "$step" = drain ] && [ -z "${tree_shown:-}" ]; then
      tree_shown=1
      echo
      note "The run as kubectl teardown status shows it, while its Job runs:"
      show "$BIN_DIR/kubectl" teardown status "configmap/$TARGET" -n "$NS" | sed 's/^/    /'
      note "(kwok simulates the Job's pod: no container runs, so there is no log to show; on a real node the tree ends with the last lines of the pod's log)"
      echo
    fi
  fi
  case $phase in Succeeded | Failed | Abandoned) break ;; esac
  operator_alive || die "the operator exited while the run was in progress"
  [ "$(date +%s)" -lt "$deadline" ] || die "timed out after ${TIMEOUT}s waiting for the TeardownRun to finish (last seen: $shown)"
  sleep 0.3
done
echo
[ "$phase" = Succeeded ] || die "TeardownRun $run ended $phase, expected Succeeded"

# ---------------------------------------------------------------------------------------------
say "The run succeeded, so the operator removed its finalizer and the ConfigMap is gone"
target_gone() {
  local out
  out=$(kubectl get configmap "$TARGET" -n "$NS" --ignore-not-found -o name) && [ -z "$out" ]
}
wait_until "ConfigMap $TARGET to be deleted" target_gone
show kubectl get configmap "$TARGET" -n "$NS" || true
show kubectl get teardownruns -n "$NS"
note "The drain step ran a Job, on the simulated node; it is kept for its ttlSecondsAfterFinished:"
show kubectl get jobs -n "$NS" -L teardown.dev/step,teardown.dev/attempt

# ---------------------------------------------------------------------------------------------
say "The run's record: per-step status and events"
# Events are sent asynchronously: wait (bounded) for the last one before describing the run.
final_event() {
  kubectl get events -n "$NS" --field-selector "involvedObject.name=$run,reason=TeardownSucceeded" -o name | grep -q .
}
wait_until "the TeardownSucceeded event on TeardownRun $run" final_event
show kubectl describe teardownrun "$run" -n "$NS"
echo
note "The same story was told on the ConfigMap itself while it existed:"
show kubectl events -n "$NS" --for "configmap/$TARGET"
