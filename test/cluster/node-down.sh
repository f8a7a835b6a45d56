#!/usr/bin/env bash
# Removes the real node of node-up.sh and its kwok cluster, and everything they added to the host:
# the pods' containers, the kubelet and containerd, their mounts and state directories, the
# cgroups, the bridge, the iptables chains and rules (ours and the kubelet's), the kernel settings
# the kubelet changed, and the host paths they made. Idempotent; works after a failed or partial
# up. Exits 1 if something could not be removed.
# Env: CLUSTER_NAME (default: the cluster the node belongs to, else teardown-node), BIN_DIR,
#      KWOK_WORKDIR (as up.sh).
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
export BIN_DIR=${BIN_DIR:-$root/bin}
NODE_LOG_TAG=node-down
# shellcheck source=node-lib.sh
. "$here/node-lib.sh"
export CLUSTER_NAME=${CLUSTER_NAME:-$(cat "$NODE_RUN/cluster" 2>/dev/null || echo teardown-node)}

[ "$(id -u)" = 0 ] || { node_log "ERROR: needs root"; exit 1; }
lock_node
failed=0

# The kubelet first, so that it restarts nothing; then every container, through containerd.
stop_pid "$NODE_RUN/kubelet.pid" kubelet
if pid_alive "$NODE_RUN/containerd.pid" containerd; then
  c="ctr --address $CONTAINERD_SOCK -n k8s.io"
  for t in $($c tasks ls -q 2>/dev/null); do $c tasks kill -s SIGKILL "$t" >/dev/null 2>&1; done
  sleep 0.5
  for t in $($c tasks ls -q 2>/dev/null); do $c tasks delete -f "$t" >/dev/null 2>&1; done
  for k in $($c containers ls -q 2>/dev/null); do $c containers delete "$k" >/dev/null 2>&1; done
fi
stop_pid "$NODE_RUN/containerd.pid" containerd
# Shims outlive containerd; the ones of our socket go too.
for pid in $(pgrep -f "containerd-shim.*-address $CONTAINERD_SOCK" 2>/dev/null); do
  node_log "stopping containerd-shim (pid $pid)"
  kill -9 "$pid" 2>/dev/null
done
# Whatever still runs in the node's cgroups (containers orphaned by a containerd that was already
# gone) is killed, and the cgroups removed, deepest first.
for d in $(cgroup_dirs); do
  [ -d "$d" ] || continue
  for i in 1 2 3 4 5; do
    pids=$(find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u)
    [ -z "$pids" ] && break
    node_log "killing what still runs in $d: $(echo $pids)"
    kill -9 $pids 2>/dev/null
    sleep 0.2
  done
  find "$d" -depth -type d -exec rmdir {} + 2>/dev/null
  if [ -d "$d" ]; then node_log "ERROR: cgroup $d is still in use"; failed=1; fi
done

# Every mount under the state directories (rootfs overlays, network namespaces, the kubelet's
# volumes and its bind mount of its own root), deepest first; then the directories, never
# crossing into a file system that could not be unmounted.
for dir in "$NODE_RUN" "$NODE_ROOT"; do
  awk -v d="$dir" '$2 == d || index($2, d "/") == 1 {print $2}' /proc/self/mounts | sort -r |
    while read -r m; do umount -l "$m" 2>/dev/null && node_log "unmounted $m"; done
done

# Network: the DNAT and its chain, and the bridge.
while iptables -t nat -D PREROUTING -i "$NODE_BRIDGE" -j "$NODE_CHAIN" 2>/dev/null; do :; done
iptables -t nat -F "$NODE_CHAIN" 2>/dev/null && iptables -t nat -X "$NODE_CHAIN" 2>/dev/null
ip link del "$NODE_BRIDGE" 2>/dev/null && node_log "deleted bridge $NODE_BRIDGE"

# What the kubelet and containerd changed on the host, as node-up found it.
if [ -d "$HOST_RECORD" ]; then
  restore_host || failed=1
fi

rm -rf --one-file-system "$NODE_ROOT" "$NODE_RUN"
"$here/down.sh" || failed=1
[ "$failed" = 0 ] && node_log "done" || node_log "ERROR: not everything could be removed (see above)"
exit "$failed"
