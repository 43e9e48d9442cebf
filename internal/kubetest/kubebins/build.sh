#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# build.sh builds kube-apiserver and etcd from the Go module proxy (no prebuilt binaries)
# into a version-keyed cache directory, for internal/kubetest.
#
#   XLB_KUBE_BIN_DIR  where the binaries go (default /var/cache/xlb/kube-v1.37.2)
#
# It is a no-op when the directory already holds a stamp file for this version. A first
# build costs ~8 min on 2 cores, ~2.3 GB peak RSS, ~0.7 GB module cache and ~2.8 GB build
# cache. Concurrent callers serialize on a lock file; the binaries appear atomically.
set -euo pipefail

KUBE_VERSION=v1.37.2
ETCD_VERSION=v3.7.0
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dir="${XLB_KUBE_BIN_DIR:-/var/cache/xlb/kube-${KUBE_VERSION}}"
stamp="$dir/stamp"
want="kube-apiserver ${KUBE_VERSION} etcd ${ETCD_VERSION}"

log() { echo "kube-bins: $*" >&2; }

if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
	log "up to date in $dir ($want)"
	exit 0
fi

mkdir -p "$dir"
exec 9>"$dir/.lock"
log "waiting for the build lock $dir/.lock"
flock 9
# Another caller may have finished the build while we waited.
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
	log "up to date in $dir ($want)"
	exit 0
fi

# A build killed mid-way (SIGKILL skips the trap) leaves its temporary directory: we hold the
# lock, so any that is left is stale.
rm -rf "$dir"/.build.*
tmp="$(mktemp -d "$dir/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

export GOTOOLCHAIN=local CGO_ENABLED=0 GOWORK=off GOFLAGS=-mod=mod
cd "$here"
start=$SECONDS
log "resolving modules for $want"
if [[ ! -s go.sum ]]; then
	go mod tidy
fi
major=${KUBE_VERSION#v}; major=${major%%.*}
minor=${KUBE_VERSION#v*.}; minor=${minor%%.*}
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=${KUBE_VERSION}"
ldflags+=" -X k8s.io/component-base/version.gitMajor=${major}"
ldflags+=" -X k8s.io/component-base/version.gitMinor=${minor}"
ldflags+=" -X k8s.io/component-base/version.gitTreeState=clean"
log "building kube-apiserver and etcd into $dir (several minutes on a cold cache)"
go build -trimpath -o "$tmp/" -ldflags "$ldflags" \
	k8s.io/kubernetes/cmd/kube-apiserver go.etcd.io/etcd/server/v3
mv "$tmp/server" "$tmp/etcd"
mv -f "$tmp/kube-apiserver" "$dir/kube-apiserver"
mv -f "$tmp/etcd" "$dir/etcd"
echo "$want" >"$stamp"
log "done in $((SECONDS - start))s: $(cd "$dir" && du -h kube-apiserver etcd | tr '\t\n' ' ')"
