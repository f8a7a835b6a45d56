#!/usr/bin/env bash
# Builds the local Kubernetes control plane from source through the Go module proxy into bin/:
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kwok and kwokctl, and with
# WITH_KUBELET=1 the kubelet of the real node (test/cluster/node-up.sh).
# Each binary is built once and reused; delete bin/ (or one file) to rebuild.
set -euo pipefail

KUBE_VERSION=${KUBE_VERSION:-v1.36.3}
STAGING_VERSION=${STAGING_VERSION:-v0.36.3}
ETCD_VERSION=${ETCD_VERSION:-v3.6.16}
KWOK_VERSION=${KWOK_VERSION:-v0.8.0}

root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${BIN_DIR:-$root/bin}
mkdir -p "$bin"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

log() { printf '[control-plane] %s\n' "$*" >&2; }

# stamp records the version a binary was built at, so a version bump rebuilds it.
stamp() { printf '%s' "$2" >"$bin/.$1.version"; }
fresh() { [ -x "$bin/$1" ] && [ "$(cat "$bin/.$1.version" 2>/dev/null)" = "$2" ]; }

# The version the binaries report is stamped at link time, as Kubernetes' own build does; without
# it they say v0.0.0-master and clients that parse the server version fail.
kube_stamp="$KUBE_VERSION+ldflags"
kube_minor=$(echo "$KUBE_VERSION" | cut -d. -f2)
kube_ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  kube_ldflags+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$kube_minor -X $pkg.gitTreeState=clean"
done
kube_bins=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
if [ "${WITH_KUBELET:-0}" = 1 ]; then kube_bins+=(kubelet); fi
need_kube=()
for b in "${kube_bins[@]}"; do fresh "$b" "$kube_stamp" || need_kube+=("$b"); done
if [ ${#need_kube[@]} -gt 0 ]; then
  log "building ${need_kube[*]} $KUBE_VERSION (first build takes several minutes)"
  mod=$work/kube
  mkdir -p "$mod"
  cd "$mod"
  go mod init teardown.dev/controlplane >/dev/null 2>&1
  # k8s.io/kubernetes points its staging modules at ./staging; outside its repository they must be
  # replaced by the published v0.x releases of the same Kubernetes version.
  kmod=$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
  {
    echo "require k8s.io/kubernetes $KUBE_VERSION"
    grep -oE 'k8s\.io/[a-z0-9-]+ => \./staging/' "$kmod" | awk -v v="$STAGING_VERSION" '{print "replace " $1 " => " $1 " " v}'
  } >>go.mod
  {
    printf '//go:build tools\n\npackage controlplane\n\nimport (\n'
    for b in "${need_kube[@]}"; do printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "$b"; done
    printf ')\n'
  } >tools.go
  go mod tidy -e >/dev/null 2>&1 || true
  go mod download
  for b in "${need_kube[@]}"; do
    log "go build $b"
    CGO_ENABLED=0 go build -trimpath -tags tools -ldflags "$kube_ldflags" -o "$bin/$b" "k8s.io/kubernetes/cmd/$b"
    stamp "$b" "$kube_stamp"
  done
fi

if ! fresh etcd "$ETCD_VERSION"; then
  log "building etcd $ETCD_VERSION"
  # etcd's server module has replace directives (../api, ../pkg, ...), so `go install module@version`
  # refuses it; build it from a throwaway module that pins all etcd modules to the same release.
  mkdir -p "$work/etcd"
  cd "$work/etcd"
  go mod init teardown.dev/etcdbuild >/dev/null 2>&1
  go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" "go.etcd.io/etcd/api/v3@$ETCD_VERSION" \
    "go.etcd.io/etcd/client/pkg/v3@$ETCD_VERSION" "go.etcd.io/etcd/client/v3@$ETCD_VERSION" \
    "go.etcd.io/etcd/pkg/v3@$ETCD_VERSION"
  CGO_ENABLED=0 go build -trimpath -o "$bin/etcd" go.etcd.io/etcd/server/v3
  stamp etcd "$ETCD_VERSION"
fi

for b in kwok kwokctl; do
  if ! fresh "$b" "$KWOK_VERSION"; then
    log "building $b $KWOK_VERSION"
    GOBIN=$bin CGO_ENABLED=0 go install -trimpath "sigs.k8s.io/kwok/cmd/$b@$KWOK_VERSION"
    stamp "$b" "$KWOK_VERSION"
  fi
done
log "control plane ready in $bin"
