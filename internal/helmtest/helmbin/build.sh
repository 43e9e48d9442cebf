#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# build.sh builds helm from its Go module (helm.sh/helm/v4, no prebuilt binary) into a
# version-keyed cache directory, for internal/helmtest and the chart deploy/helm/xlb.
#
#   XLB_HELM_BIN_DIR  where the binary goes (default /var/cache/xlb/helm-v4.3.2)
#   --path            print the binary's path on standard output once it is there
#
# It is a no-op when the directory already holds a stamp file for this version. Only Go
# modules are fetched (GOFLAGS=-mod=mod against go.sum: nothing else is downloaded).
# Concurrent callers serialize on a lock file; the binary appears atomically.
set -euo pipefail

HELM_VERSION=v4.3.2
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dir="${XLB_HELM_BIN_DIR:-/var/cache/xlb/helm-${HELM_VERSION}}"
stamp="$dir/stamp"
want="helm ${HELM_VERSION}"

log() { echo "helm-bin: $*" >&2; }
print_path=false
if [[ "${1:-}" == "--path" ]]; then
	print_path=true
fi
done_() {
	if $print_path; then
		echo "$dir/helm"
	fi
	exit 0
}

if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -x "$dir/helm" ]]; then
	log "up to date in $dir ($want)"
	done_
fi

mkdir -p "$dir"
exec 9>"$dir/.lock"
log "waiting for the build lock $dir/.lock"
flock 9
# Another caller may have finished the build while we waited.
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -x "$dir/helm" ]]; then
	log "up to date in $dir ($want)"
	done_
fi

# A build killed mid-way (SIGKILL skips the trap) leaves its temporary directory: we hold the
# lock, so any that is left is stale.
rm -rf "$dir"/.build.*
tmp="$(mktemp -d "$dir/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

export GOTOOLCHAIN=local CGO_ENABLED=0 GOWORK=off GOFLAGS=-mod=mod
cd "$here"
start=$SECONDS
# helm's own Makefile sets these: `helm version` then names the release, not "v4.3".
ldflags="-s -w -X helm.sh/helm/v4/internal/version.version=${HELM_VERSION}"
ldflags+=" -X helm.sh/helm/v4/internal/version.gitTreeState=clean"
log "building helm ${HELM_VERSION} into $dir (a few minutes on a cold cache)"
go build -trimpath -o "$tmp/helm" -ldflags "$ldflags" helm.sh/helm/v4/cmd/helm
mv -f "$tmp/helm" "$dir/helm"
echo "$want" >"$stamp"
log "done in $((SECONDS - start))s: $(du -h "$dir/helm" | cut -f1) $dir/helm"
done_
