# Sourced by node-up.sh: the host's side of the real node (bridge, DNAT to the API server,
# containerd, images).
# shellcheck shell=bash

# setup_network creates the pods' bridge and lets pods reach the API server, which listens on
# loopback, at the `kubernetes` Service address (there is no kube-proxy): a DNAT from
# $API_SERVICE_IP:443 on the bridge to the API server's port, allowed to loopback by route_localnet.
setup_network() {
  local port=${api_server##*:}
  if ! ip link show "$NODE_BRIDGE" >/dev/null 2>&1; then
    ip link add "$NODE_BRIDGE" type bridge
    ip addr add "$NODE_GATEWAY/${NODE_SUBNET#*/}" dev "$NODE_BRIDGE"
  fi
  ip link set "$NODE_BRIDGE" up
  sysctl -qw "net.ipv4.conf.$NODE_BRIDGE.route_localnet=1"
  iptables -t nat -N "$NODE_CHAIN" 2>/dev/null || iptables -t nat -F "$NODE_CHAIN"
  iptables -t nat -A "$NODE_CHAIN" -d "$API_SERVICE_IP/32" -p tcp --dport 443 -j DNAT --to-destination "127.0.0.1:$port"
  iptables -t nat -C PREROUTING -i "$NODE_BRIDGE" -j "$NODE_CHAIN" 2>/dev/null ||
    iptables -t nat -A PREROUTING -i "$NODE_BRIDGE" -j "$NODE_CHAIN"

  mkdir -p "$NODE_ROOT/cni"
  cat >"$NODE_ROOT/cni/10-teardown-node.conflist" <<JSON
{
  "cniVersion": "0.4.0",
  "name": "teardown-node",
  "plugins": [{
    "type": "bridge",
    "bridge": "$NODE_BRIDGE",
    "isGateway": true,
    "ipMasq": false,
    "hairpinMode": true,
    "ipam": {
      "type": "host-local",
      "ranges": [[{"subnet": "$NODE_SUBNET", "gateway": "$NODE_GATEWAY"}]],
      "routes": [{"dst": "0.0.0.0/0"}],
      "dataDir": "$NODE_ROOT/cni-ipam"
    }
  }]
}
JSON
  node_log "bridge $NODE_BRIDGE ($NODE_SUBNET); $API_SERVICE_IP:443 -> 127.0.0.1:$port"
}

# start_containerd starts a containerd of its own (own root, state and socket) whose CRI plugin
# uses our pause image and never lowers oom_score_adj (root here lacks CAP_SYS_RESOURCE).
start_containerd() {
  if pid_alive "$NODE_RUN/containerd.pid" containerd; then
    return
  fi
  cat >"$NODE_ROOT/containerd.toml" <<TOML
version = 2
root = "$NODE_ROOT/containerd"
state = "$NODE_RUN/containerd"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "$CONTAINERD_SOCK"
[ttrpc]
  address = "$CONTAINERD_SOCK.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$NODE_ROOT/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "teardown.dev/pause:local"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$(command -v runc)"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$NODE_ROOT/cni"
TOML
  node_log "starting containerd (log $NODE_LOGS/containerd.log)"
  setsid containerd --config "$NODE_ROOT/containerd.toml" </dev/null >"$NODE_LOGS/containerd.log" 2>&1 3>&- 9<&- &
  echo $! >"$NODE_RUN/containerd.pid"
  local i
  for i in $(seq 1 100); do
    ctr --address "$CONTAINERD_SOCK" version >/dev/null 2>&1 && return
    pid_alive "$NODE_RUN/containerd.pid" containerd || die "containerd exited: $(tail -5 "$NODE_LOGS/containerd.log")"
    sleep 0.2
  done
  die "containerd did not answer on $CONTAINERD_SOCK in 20s"
}

# import_images imports the image tarballs into containerd's k8s.io namespace, where the CRI
# plugin finds them (pods use them with imagePullPolicy IfNotPresent or Never).
import_images() {
  local images=() f
  if [ -n "${NODE_IMAGES:-}" ]; then
    read -r -a images <<<"$NODE_IMAGES"
  else
    images=("$BIN_DIR"/node-images/*.tar)
    [ -f "$BIN_DIR/image/teardown-operator.tar" ] && images+=("$BIN_DIR/image/teardown-operator.tar")
  fi
  for f in "${images[@]}"; do
    [ -f "$f" ] || die "image tarball $f: no such file"
    ctr --address "$CONTAINERD_SOCK" -n k8s.io images import "$f" >/dev/null ||
      die "importing $f failed"
    node_log "imported $(tar -xOf "$f" manifest.json | sed -n 's/.*"RepoTags":\["\([^"]*\)".*/\1/p') from $f"
  done
  local alias
  for alias in ${NODE_IMAGE_ALIASES:-}; do
    ctr --address "$CONTAINERD_SOCK" -n k8s.io images tag --force "${alias%%=*}" "${alias#*=}" >/dev/null ||
      die "NODE_IMAGE_ALIASES: tagging ${alias%%=*} as ${alias#*=} failed"
    node_log "tagged ${alias%%=*} as ${alias#*=}"
  done
}
