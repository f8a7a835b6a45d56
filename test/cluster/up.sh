#!/usr/bin/env bash
# Starts (or reuses) a local simulated Kubernetes cluster: kwokctl's "binary" runtime running the
# etcd / kube-apiserver / kube-controller-manager / kube-scheduler / kwok binaries from bin/
# (built by test/cluster/build-control-plane.sh). Idempotent.
#
# stdout: exactly one line, the kubeconfig path. Everything else goes to stderr.
#
# Env:
#   CLUSTER_NAME   cluster name (default: teardown)
#   BIN_DIR        directory holding the binaries (default: <repo>/bin)
#   KWOK_WORKDIR   kwokctl state directory (default: $BIN_DIR/kwok-state)
#   UP_TIMEOUT     seconds to wait for the cluster to become usable (default: 180)
#   AUDIT_POLICY   an audit policy file: kube-apiserver then writes an audit log, in
#                  $KWOK_WORKDIR/clusters/$CLUSTER_NAME/logs/audit.log (the chaos suite reads it)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
BIN_DIR=${BIN_DIR:-$root/bin}
BIN_DIR=$(cd "$BIN_DIR" && pwd)
CLUSTER_NAME=${CLUSTER_NAME:-teardown}
export KWOK_WORKDIR=${KWOK_WORKDIR:-$BIN_DIR/kwok-state}
UP_TIMEOUT=${UP_TIMEOUT:-180}
config=$here/kwok.yaml

exec 3>&1 1>&2 # keep stdout for the kubeconfig path only
log() { printf '[cluster-up] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

case $CLUSTER_NAME in
  clusters | cache | '' | */* | .*) die "invalid CLUSTER_NAME '$CLUSTER_NAME'" ;;
esac
for b in etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok kwokctl; do
  [ -x "$BIN_DIR/$b" ] || die "$BIN_DIR/$b missing; run test/cluster/build-control-plane.sh first"
done

mkdir -p "$KWOK_WORKDIR"
KWOK_WORKDIR=$(cd "$KWOK_WORKDIR" && pwd)
# kwokctl looks up kubectl on PATH before it would try to download one: make it find ours.
export PATH=$BIN_DIR:$PATH
# kwokctl starts the components as daemons that inherit every open fd without close-on-exec; close all
# fds above 2 (e.g. our saved stdout, which may be the pipe of a `KUBECONFIG=$(up.sh)` command
# substitution that would otherwise never see EOF) before running it.
kwokctl() {
  (
    for fd in /proc/self/fd/*; do
      fd=${fd##*/}
      if [ "$fd" -gt 2 ]; then eval "exec $fd>&-"; fi
    done 2>/dev/null
    exec "$BIN_DIR/kwokctl" --name "$CLUSTER_NAME" "$@" </dev/null >&2
  )
}
kubectl() { "$BIN_DIR/kubectl" --kubeconfig "$kubeconfig" "$@"; }

state=$KWOK_WORKDIR/$CLUSTER_NAME
cluster_dir=$KWOK_WORKDIR/clusters/$CLUSTER_NAME
kubeconfig=$state/kubeconfig
mkdir -p "$state"
# kubectl's discovery cache would otherwise go to ~/.kube/cache.
export KUBECACHEDIR=${KUBECACHEDIR:-$state/kube-cache}

# The stage/config file only applies when a cluster is created: recreate the cluster when it changed.
audit_args=()
if [ -n "${AUDIT_POLICY:-}" ]; then
  [ -f "$AUDIT_POLICY" ] || die "AUDIT_POLICY $AUDIT_POLICY: no such file"
  audit_args=(--kube-audit-policy "$(cd "$(dirname "$AUDIT_POLICY")" && pwd)/$(basename "$AUDIT_POLICY")")
fi
want_sum=$(cat "$config" ${AUDIT_POLICY:+"$AUDIT_POLICY"} | sha256sum | cut -d' ' -f1)
if [ -d "$cluster_dir" ] && [ "$(cat "$state/config.sha256" 2>/dev/null)" != "$want_sum" ]; then
  log "cluster $CLUSTER_NAME was created from a different $config; recreating it"
  kwokctl delete cluster --kubeconfig "$kubeconfig" || true
  rm -rf "$cluster_dir"
fi

start=$(date +%s)
log "starting kwok cluster $CLUSTER_NAME (state in $KWOK_WORKDIR)"
# --kubeconfig '' keeps kwokctl away from ~/.kube/config; an existing, healthy cluster is left as is
# and a stopped one is started again.
kwokctl --config "$config" create cluster \
  --runtime binary \
  --kubeconfig '' \
  --etcd-binary "$BIN_DIR/etcd" \
  --kube-apiserver-binary "$BIN_DIR/kube-apiserver" \
  --kube-controller-manager-binary "$BIN_DIR/kube-controller-manager" \
  --kube-scheduler-binary "$BIN_DIR/kube-scheduler" \
  --kwok-controller-binary "$BIN_DIR/kwok" \
  "${audit_args[@]}" \
  --timeout "${UP_TIMEOUT}s"
printf '%s\n' "$want_sum" >"$state/config.sha256"
install -m 0600 "$cluster_dir/kubeconfig.yaml" "$kubeconfig"

deadline=$((start + UP_TIMEOUT))
wait_for() { # wait_for <description> <command...>
  local what=$1
  shift
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$deadline" ] || die "timed out after ${UP_TIMEOUT}s waiting for $what (logs: $cluster_dir/logs)"
    sleep 1
  done
  log "$what: ok ($(($(date +%s) - start))s)"
}

wait_for "kube-apiserver /readyz" kubectl get --raw /readyz

# One fake node, managed by kwok (kwok-controller manages the nodes annotated as fake). No taints, so
# ordinary pods schedule onto it.
kubectl apply -f - >&2 <<'EOF'
apiVersion: v1
kind: Node
metadata:
  name: kwok-node-0
  annotations:
    kwok.x-k8s.io/node: fake
    node.alpha.kubernetes.io/ttl: "0"
  labels:
    kubernetes.io/hostname: kwok-node-0
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    kubernetes.io/role: agent
    type: kwok
EOF

wait_for "node kwok-node-0 Ready" kubectl wait --for=condition=Ready node/kwok-node-0 --timeout=5s
wait_for "serviceaccount default/default" kubectl -n default get serviceaccount default

log "cluster $CLUSTER_NAME ready in $(($(date +%s) - start))s; export KUBECONFIG=$kubeconfig"
printf '%s\n' "$kubeconfig" >&3
