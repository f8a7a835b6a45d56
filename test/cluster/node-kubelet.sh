# Sourced by node-up.sh: the kubelet of the real node, its credentials and configuration.
# shellcheck shell=bash

# kubelet_credentials signs the kubelet's client certificate (system:node:localhost in
# system:nodes, so the Node authorizer admits it) with the cluster's CA and writes its kubeconfig.
kubelet_credentials() {
  local pki=$NODE_ROOT/pki
  mkdir -p "$pki"
  if [ ! -f "$pki/kubelet.crt" ] || ! openssl verify -CAfile "$cluster_dir/pki/ca.crt" "$pki/kubelet.crt" >/dev/null 2>&1; then
    openssl req -new -newkey rsa:2048 -nodes -keyout "$pki/kubelet.key" -out "$pki/kubelet.csr" \
      -subj "/O=system:nodes/CN=system:node:$NODE_NAME" 2>/dev/null
    openssl x509 -req -in "$pki/kubelet.csr" -CA "$cluster_dir/pki/ca.crt" -CAkey "$cluster_dir/pki/ca.key" \
      -CAcreateserial -out "$pki/kubelet.crt" -days 30 2>/dev/null
  fi
  cat >"$NODE_ROOT/kubelet.kubeconfig" <<YAML
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: $api_server
    certificate-authority: $cluster_dir/pki/ca.crt
users:
- name: kubelet
  user:
    client-certificate: $pki/kubelet.crt
    client-key: $pki/kubelet.key
contexts:
- name: kubelet
  context: {cluster: local, user: kubelet}
current-context: kubelet
YAML
}

# kubelet_config writes the kubelet's configuration. It listens on loopback only, where it lets
# anyone in: kwokctl's API server calls it (logs, exec) without a client certificate.
kubelet_config() {
  cat >"$NODE_ROOT/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization:
  mode: AlwaysAllow
containerRuntimeEndpoint: unix://$CONTAINERD_SOCK
imageServiceEndpoint: unix://$CONTAINERD_SOCK
cgroupDriver: cgroupfs
cgroupRoot: /$NODE_CGROUP
failCgroupV1: false
failSwapOn: false
podPidsLimit: -1
podLogsDir: $NODE_ROOT/pod-logs
resolvConf: /etc/resolv.conf
# Imported images can never be pulled again: never collect them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  nodefs.inodesFree: 1%
  imagefs.available: 1%
  imagefs.inodesFree: 1%
serializeImagePulls: false
maxPods: 110
YAML
}

# start_kubelet starts the kubelet under the cgroup root it is given, created in every hierarchy.
# A kubelet already running keeps running unless its credentials changed (up.sh recreated the
# cluster, with a new CA and port).
start_kubelet() {
  local before
  before=$({ cat "$NODE_ROOT/kubelet.kubeconfig" "$NODE_ROOT/pki/kubelet.crt" 2>/dev/null || true; } | sha256sum)
  kubelet_credentials
  kubelet_config
  if pid_alive "$NODE_RUN/kubelet.pid" kubelet; then
    [ "$before" = "$(cat "$NODE_ROOT/kubelet.kubeconfig" "$NODE_ROOT/pki/kubelet.crt" | sha256sum)" ] && return
    node_log "the cluster changed: restarting the kubelet"
    stop_pid "$NODE_RUN/kubelet.pid" kubelet
  fi
  local d
  for d in $(cgroup_dirs); do mkdir -p "$d"; done
  mkdir -p "$NODE_ROOT/kubelet" "$NODE_ROOT/pod-logs"
  node_log "starting the kubelet as node $NODE_NAME (log $NODE_LOGS/kubelet.log)"
  setsid "$BIN_DIR/kubelet" --config "$NODE_ROOT/kubelet.yaml" --kubeconfig "$NODE_ROOT/kubelet.kubeconfig" \
    --hostname-override "$NODE_NAME" --root-dir "$NODE_ROOT/kubelet" --cert-dir "$NODE_ROOT/kubelet/pki" \
    --node-labels teardown.dev/real-node=true --v 2 </dev/null >"$NODE_LOGS/kubelet.log" 2>&1 3>&- 9<&- &
  echo $! >"$NODE_RUN/kubelet.pid"
  sleep 1
  if grep -q "strict decoding error" "$NODE_LOGS/kubelet.log"; then
    die "the kubelet configuration has a field this kubelet does not know: $(grep -m1 "strict decoding error" "$NODE_LOGS/kubelet.log")"
  fi
}

# wait_node_ready waits up to 120 s for the node to be Ready.
wait_node_ready() {
  local deadline=$(($(date +%s) + 120))
  until kubectl wait --for=condition=Ready "node/$NODE_NAME" --timeout=5s >/dev/null 2>&1; do
    pid_alive "$NODE_RUN/kubelet.pid" kubelet || die "the kubelet exited: $(tail -5 "$NODE_LOGS/kubelet.log")"
    [ "$(date +%s)" -lt "$deadline" ] || die "node $NODE_NAME not Ready after 120s"
    sleep 1
  done
}
