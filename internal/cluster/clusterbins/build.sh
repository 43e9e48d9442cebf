#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# build.sh builds the Kubernetes binaries of a real cluster from the Go module proxy (no
# prebuilt binaries) into the version-keyed cache that kubetest/kubebins fills with
# kube-apiserver and etcd: kubelet, kube-proxy, kube-controller-manager, kube-scheduler,
# kubectl, agnhost and e2e.test (upstream's runner with the sig-network specs only).
#
#   XLB_KUBE_BIN_DIR  where the binaries go (default /var/cache/xlb/kube-v1.37.2)
#
# A no-op when the directory holds a cluster stamp for this version. Concurrent callers
# serialize on the same lock file as kubebins; the binaries appear atomically.
set -euo pipefail

KUBE_VERSION=v1.37.2
AGNHOST_VERSION=2.66.1
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dir="${XLB_KUBE_BIN_DIR:-/var/cache/xlb/kube-${KUBE_VERSION}}"
stamp="$dir/stamp-cluster"
bins="kubelet kube-proxy kube-controller-manager kube-scheduler kubectl agnhost e2e.test"
want="cluster ${KUBE_VERSION} agnhost ${AGNHOST_VERSION}: ${bins}"

log() { echo "cluster-bins: $*" >&2; }

if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
	log "up to date in $dir"
	exit 0
fi

mkdir -p "$dir"
exec 9>"$dir/.lock"
log "waiting for the build lock $dir/.lock"
flock 9
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
	log "up to date in $dir"
	exit 0
fi
rm -rf "$dir"/.cbuild.*
tmp="$(mktemp -d "$dir/.cbuild.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

export GOTOOLCHAIN=local CGO_ENABLED=0 GOWORK=off GOFLAGS=-mod=mod
cd "$here"
start=$SECONDS
if [[ ! -s go.sum ]]; then
	go mod tidy
fi
major=${KUBE_VERSION#v}; major=${major%%.*}
minor=${KUBE_VERSION#v*.}; minor=${minor%%.*}
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=${KUBE_VERSION}"
ldflags+=" -X k8s.io/component-base/version.gitMajor=${major}"
ldflags+=" -X k8s.io/component-base/version.gitMinor=${minor}"
ldflags+=" -X k8s.io/component-base/version.gitTreeState=clean"
log "building ${bins} into $dir (a cold cache takes long on 2 cores)"
go build -trimpath -o "$tmp/" -ldflags "$ldflags" \
	k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy \
	k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler \
	k8s.io/kubernetes/cmd/kubectl
log "kubelet..kubectl built at $((SECONDS - start))s"
go build -trimpath -o "$tmp/agnhost" -ldflags "-s -w" k8s.io/kubernetes/test/images/agnhost
log "agnhost built at $((SECONDS - start))s"
go test -c -trimpath -o "$tmp/e2e.test" -ldflags "$ldflags" ./e2e
log "e2e.test built at $((SECONDS - start))s"
for b in $bins; do mv -f "$tmp/$b" "$dir/$b"; done
echo "$want" >"$stamp"
log "done in $((SECONDS - start))s"
