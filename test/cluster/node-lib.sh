# Shared by node-up.sh and node-down.sh: where the real node keeps its state on the host, and what
# it adds to the host. Only one real node runs on a host at a time: the bridge, its iptables chain,
# the kubelet's ports and the cgroup root are the host's.

# shellcheck shell=bash
NODE_ROOT=${NODE_ROOT:-/var/lib/teardown-node} # containerd's and the kubelet's state, certs, configs
NODE_RUN=${NODE_RUN:-/run/teardown-node}       # containerd's state and socket, pid files, owner
NODE_LOGS=${NODE_LOGS:-$BIN_DIR/node-logs}     # containerd's and the kubelet's logs, kept after down
NODE_NAME=localhost                            # the API server dials the kubelet by this name
NODE_BRIDGE=tdnode0
NODE_SUBNET=10.88.77.0/24
NODE_GATEWAY=10.88.77.1
NODE_CHAIN=TEARDOWN-NODE        # nat chain holding the DNAT to the API server
NODE_CGROUP=teardown-node       # the kubelet's cgroup root, in every hierarchy
API_SERVICE_IP=10.0.0.1         # the `kubernetes` Service, first address of kwokctl's service range
KUBELET_PORT=10250
KUBELET_HEALTHZ_PORT=10248
CONTAINERD_SOCK=$NODE_RUN/containerd.sock

node_log() { printf '[%s] %s\n' "${NODE_LOG_TAG:-node}" "$*" >&2; }

# The kernel settings the kubelet changes at start (protectKernelDefaults is off): node-up records
# them before it starts and node-down puts them back.
KUBELET_SYSCTLS="kernel.panic_on_oops kernel.panic vm.overcommit_memory vm.panic_on_oom kernel.keys.root_maxkeys kernel.keys.root_maxbytes"
# Host paths the kubelet and containerd's CNI library use whatever they are told: removed by
# node-down when node-up found them absent.
HOST_PATHS="/var/lib/kubelet /var/lib/cni /var/log/containers /var/log/pods"
HOST_RECORD=$NODE_RUN/host-before # what the host was like before the node, written once by node-up

# cgroup_dirs prints the kubelet's cgroup root in every mounted hierarchy: the one root of a pure
# cgroup v2 host, or each v1 hierarchy (and the unified one) of a hybrid one.
cgroup_dirs() {
  local d
  if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
    printf '%s\n' "/sys/fs/cgroup/$NODE_CGROUP"
    return
  fi
  for d in /sys/fs/cgroup/*/; do
    [ -f "$d/cgroup.procs" ] || [ -f "$d/tasks" ] || continue
    printf '%s\n' "${d%/}/$NODE_CGROUP"
  done
}

# lock_node serializes node-up and node-down on this host (one real node at a time). It locks
# /run itself, so that it leaves no lock file behind.
lock_node() {
  exec 9</run
  flock -w 600 9 || { node_log "ERROR: another node-up or node-down has held the lock for 10 minutes"; exit 1; }
}

# iptables_chains FAMILY prints "TABLE CHAIN" for every chain of the kubelet's prefix (KUBE-).
iptables_chains() {
  local t
  for t in filter nat mangle; do
    "$1" -t "$t" -S 2>/dev/null | awk -v t="$t" '$1 == "-N" && $2 ~ /^KUBE-/ {print t, $2}'
  done
}

# record_host writes, once, what node-up is about to change on the host.
record_host() {
  [ -d "$HOST_RECORD" ] && return
  mkdir -p "$HOST_RECORD.tmp"
  local k p
  for k in $KUBELET_SYSCTLS; do printf '%s=%s\n' "$k" "$(sysctl -n "$k")"; done >"$HOST_RECORD.tmp/sysctls"
  cat /proc/sys/net/ipv4/ip_forward >"$HOST_RECORD.tmp/ip_forward"
  for p in iptables ip6tables; do iptables_chains "$p" >"$HOST_RECORD.tmp/$p"; done
  for p in $HOST_PATHS; do [ -e "$p" ] && printf '%s\n' "$p"; done >"$HOST_RECORD.tmp/paths"
  mv "$HOST_RECORD.tmp" "$HOST_RECORD"
}

# pid_alive PIDFILE EXE: the pid in PIDFILE runs EXE (by basename).
pid_alive() {
  local pid
  pid=$(cat "$1" 2>/dev/null) || return 1
  [ -n "$pid" ] && [ "$(basename "$(readlink "/proc/$pid/exe" 2>/dev/null)")" = "$2" ]
}

# stop_pid PIDFILE EXE: TERM, then KILL after 10 s, the process recorded in PIDFILE if it is EXE.
stop_pid() {
  local pidfile=$1 exe=$2 pid i
  if pid_alive "$pidfile" "$exe"; then
    pid=$(cat "$pidfile")
    node_log "stopping $exe (pid $pid)"
    kill "$pid" 2>/dev/null || true
    for i in $(seq 1 100); do
      pid_alive "$pidfile" "$exe" || break
      sleep 0.1
    done
    if pid_alive "$pidfile" "$exe"; then kill -9 "$pid" 2>/dev/null || true; fi
  fi
  rm -f "$pidfile"
}

# restore_host puts back what record_host recorded: the kernel settings, ip_forward, the kubelet's
# iptables chains (KUBE-FIREWALL, KUBE-KUBELET-CANARY, ...: removed when they were not there) and
# the host paths node-up found absent.
restore_host() {
  local line k v fam t c p
  while IFS='=' read -r k v; do sysctl -qw "$k=$v" || return 1; done <"$HOST_RECORD/sysctls"
  sysctl -qw "net.ipv4.ip_forward=$(cat "$HOST_RECORD/ip_forward")" || return 1
  for fam in iptables ip6tables; do
    iptables_chains "$fam" | grep -vxF -f "$HOST_RECORD/$fam" | while read -r t c; do
      # Every rule that jumps to the chain, then the chain.
      "$fam" -t "$t" -S | awk -v c="$c" '$1 == "-A" && / -j / { for (i = 1; i < NF; i++) if ($i == "-j" && $(i+1) == c) print }' |
        while read -r line; do
          # The rule as iptables -S printed it, quoted comments and all.
          eval "\"\$fam\" -t \"\$t\" -D ${line#-A }"
        done
      "$fam" -t "$t" -F "$c" && "$fam" -t "$t" -X "$c" && node_log "removed the kubelet's $fam chain $t/$c"
    done
  done
  for p in $HOST_PATHS; do
    if [ -e "$p" ] && ! grep -qxF "$p" "$HOST_RECORD/paths"; then
      rm -rf --one-file-system "$p" && node_log "removed $p"
    fi
  done
  return 0
}
