#!/usr/bin/env bash
# Stops and deletes the kwok cluster started by up.sh. Idempotent: no error if it does not exist.
# Env: CLUSTER_NAME (default teardown), BIN_DIR (default <repo>/bin), KWOK_WORKDIR (default $BIN_DIR/kwok-state)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
BIN_DIR=${BIN_DIR:-$root/bin}
CLUSTER_NAME=${CLUSTER_NAME:-teardown}
export KWOK_WORKDIR=${KWOK_WORKDIR:-$BIN_DIR/kwok-state}
log() { printf '[cluster-down] %s\n' "$*" >&2; }

case $CLUSTER_NAME in
  clusters | cache | '' | */* | .*) log "ERROR: invalid CLUSTER_NAME '$CLUSTER_NAME'"; exit 1 ;;
esac

state=$KWOK_WORKDIR/$CLUSTER_NAME
cluster_dir=$KWOK_WORKDIR/clusters/$CLUSTER_NAME

if [ -d "$cluster_dir" ]; then
  if [ -x "$BIN_DIR/kwokctl" ]; then
    log "deleting kwok cluster $CLUSTER_NAME"
    # --kubeconfig must be non-empty; point it at our own copy (deleted below), never ~/.kube/config.
    "$BIN_DIR/kwokctl" --name "$CLUSTER_NAME" delete cluster --force --kubeconfig "$state/kubeconfig" >&2 ||
      log "kwokctl delete cluster failed; cleaning up by hand"
  fi
  # Fallback: stop any component that is still running from its pid file.
  for pidfile in "$cluster_dir"/pids/*.pid; do
    [ -f "$pidfile" ] || continue
    pid=$(cat "$pidfile")
    # Only signal it if it still is that component (runs with the cluster directory as cwd).
    if [ -n "$pid" ] && [ "$(readlink "/proc/$pid/cwd" 2>/dev/null)" = "$(readlink -f "$cluster_dir")" ]; then
      log "stopping $(basename "$pidfile" .pid) (pid $pid)"
      kill "$pid" 2>/dev/null || true
    fi
  done
  rm -rf "$cluster_dir"
else
  log "kwok cluster $CLUSTER_NAME does not exist"
fi
rm -rf "$state"
rmdir "$KWOK_WORKDIR/clusters" "$KWOK_WORKDIR" 2>/dev/null || true # only if now empty
