#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# containerd.sh unpacks Debian forky's containerd 2.1 (bookworm's 1.6 is older than kubelet 1.37
# accepts; forky's needs only libc6 >= 2.34) into a version-keyed directory, without adding
# forky to the system's apt sources: apt-get runs with a private sources list, lists and cache
# under a temporary directory, and only downloads the package; dpkg-deb extracts it.
#
#   XLB_CONTAINERD_DIR  where the binaries go (default /var/cache/xlb/containerd-2.1.9)
#
# A no-op when the directory holds containerd, containerd-shim-runc-v2 and ctr of that version.
set -euo pipefail

VERSION=2.1.9
dir="${XLB_CONTAINERD_DIR:-/var/cache/xlb/containerd-${VERSION}}"
log() { echo "cluster-containerd: $*" >&2; }

if [[ -x "$dir/containerd" && -x "$dir/containerd-shim-runc-v2" && -x "$dir/ctr" ]] &&
	"$dir/containerd" --version 2>/dev/null | grep -q " v\?${VERSION}"; then
	log "up to date in $dir"
	exit 0
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/lists/partial" "$tmp/cache/archives/partial" "$tmp/etc"
cat >"$tmp/etc/forky.sources" <<SRC
Types: deb
URIs: http://deb.debian.org/debian
Suites: forky
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
apt=(apt-get -q -o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$tmp/etc"
	-o "Dir::State::Lists=$tmp/lists" -o "Dir::Cache=$tmp/cache" -o "Dir::Etc::Preferences=/dev/null"
	-o "Dir::Etc::PreferencesParts=/dev/null")
"${apt[@]}" update
ver="$(apt-cache -o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$tmp/etc" \
	-o "Dir::State::Lists=$tmp/lists" -o "Dir::Cache=$tmp/cache" madison containerd |
	awk -v v="$VERSION" '$3 ~ "^"v {print $3; exit}')"
if [[ -z "$ver" ]]; then
	log "forky has no containerd ${VERSION}: update VERSION here and ContainerdDir in internal/cluster"
	exit 1
fi
(cd "$tmp" && "${apt[@]}" download "containerd=$ver")
dpkg-deb -x "$tmp"/containerd_*.deb "$tmp/x"
mkdir -p "$dir"
for b in containerd containerd-shim-runc-v2 ctr; do
	install -m 0755 "$tmp/x/usr/bin/$b" "$dir/.$b.new"
	mv -f "$dir/.$b.new" "$dir/$b"
done
log "containerd $ver in $dir"
