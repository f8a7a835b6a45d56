#!/usr/bin/env bash
# Starts a local cluster with a real node: the kwok cluster of up.sh (its fake node kwok-node-0
# tainted, so that pods go to the real one) plus containerd, runc and the CNI bridge plugin from
# Debian's packages and a kubelet built from the module proxy (build-control-plane.sh with
# WITH_KUBELET=1), registered as node "localhost". Images cannot be pulled: the pause and busybox
# images of hack/nodeimages, and the operator image of `make image` when built, are imported.
# What it takes on a machine without systemd or a registry is in docs/development.md ("A real node").
#
# Idempotent: run again, it re-imports the images. node-down.sh removes everything it added to
# the host, also after a failed up. Must run as root.
#
# stdout: exactly one line, the kubeconfig path. Everything else goes to stderr.
#
# Env: CLUSTER_NAME (default teardown-node), BIN_DIR, KWOK_WORKDIR (as up.sh),
#      NODE_IMAGES  image tarballs to import (default: bin/node-images/*.tar and
#                   bin/image/teardown-operator.tar if built)
#      NODE_IMAGE_ALIASES  more names for imported images, as "SOURCE=ALIAS ..." (a registry
#                   name of your own, as a chart's image.repository would pull)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
BIN_DIR=${BIN_DIR:-$root/bin}
BIN_DIR=$(cd "$BIN_DIR" && pwd)
export CLUSTER_NAME=${CLUSTER_NAME:-teardown-node}
export KWOK_WORKDIR=${KWOK_WORKDIR:-$BIN_DIR/kwok-state}
export BIN_DIR
NODE_LOG_TAG=node-up
# shellcheck source=node-lib.sh
. "$here/node-lib.sh"

exec 3>&1 1>&2 # keep stdout for the kubeconfig path only
die() {
  node_log "ERROR: $*"
  node_log "logs: $NODE_LOGS; remove what was started with test/cluster/node-down.sh"
  exit 1
}

[ "$(id -u)" = 0 ] || die "the real node needs root (containerd, the kubelet, a bridge, iptables)"
for b in containerd ctr runc iptables ip6tables ip openssl flock; do
  command -v "$b" >/dev/null || die "$b missing: apt-get install containerd runc containernetworking-plugins iptables iproute2 openssl (make node-deps)"
done
[ -x /usr/lib/cni/bridge ] || die "/usr/lib/cni/bridge missing: apt-get install containernetworking-plugins"
[ -x "$BIN_DIR/kubelet" ] || die "$BIN_DIR/kubelet missing: WITH_KUBELET=1 test/cluster/build-control-plane.sh (make node-bins)"
[ -f "$BIN_DIR/node-images/pause.tar" ] || die "$BIN_DIR/node-images/pause.tar missing: go run ./hack/nodeimages (make node-images)"

lock_node
mkdir -p "$NODE_ROOT" "$NODE_RUN" "$NODE_LOGS"
owner=$(cat "$NODE_RUN/cluster" 2>/dev/null || true)
if [ -n "$owner" ] && [ "$owner" != "$CLUSTER_NAME" ]; then
  die "the real node of cluster $owner runs on this host; CLUSTER_NAME=$owner test/cluster/node-down.sh first"
fi
printf '%s\n' "$CLUSTER_NAME" >"$NODE_RUN/cluster"
record_host

kubeconfig=$("$here/up.sh") || die "the kwok cluster did not start"
api_server=$(sed -n 's/^ *server: *//p' "$kubeconfig" | head -1) # https://127.0.0.1:PORT
cluster_dir=$KWOK_WORKDIR/clusters/$CLUSTER_NAME
kubectl() { "$BIN_DIR/kubectl" --kubeconfig "$kubeconfig" "$@"; }
start=$(date +%s)

# shellcheck source=node-host.sh
. "$here/node-host.sh"
# shellcheck source=node-kubelet.sh
. "$here/node-kubelet.sh"

setup_network
start_containerd
import_images
start_kubelet

kubectl taint node kwok-node-0 kwok.x-k8s.io/node=fake:NoSchedule --overwrite >/dev/null
wait_node_ready
node_log "real node $NODE_NAME ready in $(($(date +%s) - start))s; export KUBECONFIG=$kubeconfig"
printf '%s\n' "$kubeconfig" >&3
