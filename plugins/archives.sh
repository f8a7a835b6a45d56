#!/usr/bin/env bash
# Builds kubectl-teardown for every platform the krew manifest lists into bin/plugin/, one
# tar.gz each, and renders plugins/teardown.yaml into bin/plugin/teardown.yaml with their URIs
# and sha256 sums, as krew-release-bot does on a release. VERSION (default: git describe, or
# v0.0.0-dev) names the release.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$root/bin/plugin
version=${VERSION:-$(git -C "$root" describe --tags --always 2>/dev/null || echo v0.0.0-dev)}
case $version in v*) ;; *) version=v0.0.0-$version ;; esac
mkdir -p "$out"
manifest=$(sed -n '/^apiVersion:/,$p' "$root/plugins/teardown.yaml")
manifest=${manifest//"{{ .TagName }}"/$version}
for platform in linux/amd64 linux/arm64 darwin/amd64 darwin/arm64; do
  os=${platform%/*} arch=${platform#*/}
  name=kubectl-teardown_${os}_${arch}
  dir=$(mktemp -d)
  CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath -ldflags "-s -w -X github.com/teardown-dev/teardown-operator/cli.Version=$version" \
    -o "$dir/kubectl-teardown" "$root/cmd/kubectl-teardown"
  cp "$root/README.md" "$root/plugins/kubectl_complete-teardown" "$dir/"
  tar -C "$dir" -czf "$out/$name.tar.gz" kubectl-teardown kubectl_complete-teardown README.md
  rm -rf "$dir"
  sum=$(sha256sum "$out/$name.tar.gz" | cut -d' ' -f1)
  uri="https://github.com/teardown-dev/teardown-operator/releases/download/$version/$name.tar.gz"
  manifest=${manifest//"{{ addURIAndSha \"$uri\" .TagName }}"/"uri: $uri
    sha256: $sum"}
  echo "bin/plugin/$name.tar.gz  sha256 $sum"
done
printf '%s\n' "$manifest" >"$out/teardown.yaml"
if grep -q '{{' "$out/teardown.yaml"; then
  echo "plugins/archives.sh: template placeholders left in bin/plugin/teardown.yaml" >&2
  exit 1
fi
echo "bin/plugin/teardown.yaml ($version)"
