#!/usr/bin/env bash
# Removes the real node of node-up.sh and its kwok cluster, and everything they added to the host:
# the pods' containers, the kubelet and containerd, their mounts and state directories, the
# cgroups, the bridge, the iptables chain and rule. Idempotent; works after a failed or partial up.
# Env: CLUSTER_NAME (default teardown-node), BIN_DIR, KWOK_WORKDIR (as up.sh).
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
export BIN_DIR=${BIN_DIR:-$root/bin}
export CLUSTER_NAME=${CLUSTER_NAME:-teardown-node}
NODE_LOG_TAG=node-down
# shellcheck source=node-lib.sh
. "$here/node-lib.sh"

[ "$(id -u)" = 0 ] || { node_log "ERROR: needs root"; exit 1; }

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
# Shims outlive containerd; the ones of our socket go too, with their containers.
for pid in $(pgrep -f "containerd-shim.*-address $CONTAINERD_SOCK" 2>/dev/null); do
  node_log "stopping containerd-shim (pid $pid)"
  kill -9 "$pid" 2>/dev/null
done

# Every mount under the state directories (rootfs overlays, network namespaces, the kubelet's
# volumes and its bind mount of its own root), deepest first.
for dir in "$NODE_RUN" "$NODE_ROOT"; do
  awk -v d="$dir" '$2 == d || index($2, d "/") == 1 {print $2}' /proc/self/mounts | sort -r |
    while read -r m; do umount -l "$m" 2>/dev/null && node_log "unmounted $m"; done
done

# The cgroups, deepest first, once their processes are gone.
for d in $(cgroup_dirs); do
  [ -d "$d" ] || continue
  find "$d" -depth -type d -exec rmdir {} + 2>/dev/null
  [ -d "$d" ] && node_log "WARNING: cgroup $d still in use" || true
done

# Network: the DNAT and its chain, the bridge, and ip_forward as it was.
while iptables -t nat -D PREROUTING -i "$NODE_BRIDGE" -j "$NODE_CHAIN" 2>/dev/null; do :; done
iptables -t nat -F "$NODE_CHAIN" 2>/dev/null && iptables -t nat -X "$NODE_CHAIN" 2>/dev/null
ip link del "$NODE_BRIDGE" 2>/dev/null && node_log "deleted bridge $NODE_BRIDGE"
if [ -f "$NODE_RUN/ip_forward" ]; then
  sysctl -qw "net.ipv4.ip_forward=$(cat "$NODE_RUN/ip_forward")"
fi

# The kubelet's links to container logs.
if [ -d /var/log/containers ]; then
  find /var/log/containers -maxdepth 1 -type l -lname "$NODE_ROOT/*" -delete
  [ -f "$NODE_RUN/made-var-log-containers" ] && rmdir /var/log/containers 2>/dev/null
fi

rm -rf "$NODE_ROOT" "$NODE_RUN"
"$here/down.sh"
node_log "done"
