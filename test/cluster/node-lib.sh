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

# cgroup_dirs prints the kubelet's cgroup root in every mounted hierarchy (v1 and v2).
cgroup_dirs() {
  local d
  for d in /sys/fs/cgroup/*/ /sys/fs/cgroup/; do
    [ -f "$d/cgroup.procs" ] || [ -f "$d/tasks" ] || continue
    printf '%s\n' "${d%/}/$NODE_CGROUP"
  done | sort -u
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
