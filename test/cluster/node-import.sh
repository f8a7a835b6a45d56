#!/usr/bin/env bash
# Imports image tarballs into the running real node's containerd, as node-up.sh does at start: for
# an image built after the node came up (the test suite's earlier release of the operator, say).
#
# Usage: node-import.sh TARBALL...
# Env: BIN_DIR (as node-up.sh), NODE_IMAGE_ALIASES (more names for the imported images, as node-up.sh).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
BIN_DIR=${BIN_DIR:-$root/bin}
NODE_LOG_TAG=node-import
# shellcheck source=node-lib.sh
. "$here/node-lib.sh"
die() {
  node_log "ERROR: $*"
  exit 1
}
# shellcheck source=node-host.sh
. "$here/node-host.sh"

[ $# -gt 0 ] || die "usage: node-import.sh TARBALL..."
[ -S "$CONTAINERD_SOCK" ] || die "no containerd at $CONTAINERD_SOCK: start the real node first (make node-up)"
NODE_IMAGES="$*"
import_images
