#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Provisions the Vagrant VM (see ../../Vagrantfile) as the xlb lab and test host: what a fresh
# Debian 12 machine needs beyond `make deps`. Idempotent: `vagrant provision` runs it again.
#
# With XLB_PREBUILT set (the Vagrantfile's XLB_VAGRANT_PREBUILT, copied to /opt/xlb-prebuilt)
# the binaries built on the host are put in place instead: no Go, no compiling, no download.
set -eu

if [ -n "${XLB_PREBUILT:-}" ]; then
	for f in xlb xlb-lab kube-apiserver etcd stamp; do
		[ -f "$XLB_PREBUILT/$f" ] || { echo "provision: $XLB_PREBUILT/$f missing (make vagrant-prebuilt)" >&2; exit 1; }
	done
	# The lab's runtime packages (the Makefile's DEB_PKGS minus the build tools, and LAB_PKGS):
	# in a box built by build-box.sh already; otherwise from apt.
	pkgs="bird2 frr nftables iproute2 ethtool curl iputils-ping make"
	missing=""
	for p in $pkgs; do
		dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
	done
	if [ -n "$missing" ]; then
		apt-get update -q
		# shellcheck disable=SC2086
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q $missing
	fi
	install -d /xlb/bin
	install -m 0755 "$XLB_PREBUILT/xlb" "$XLB_PREBUILT/xlb-lab" /xlb/bin/
	# Where internal/kubetest looks (DefaultBinDir), with build.sh's stamp: `make kube-bins`
	# is then a no-op.
	kdir="/var/cache/xlb/kube-$(cut -d' ' -f2 "$XLB_PREBUILT/stamp")"
	install -d "$kdir"
	install -m 0755 "$XLB_PREBUILT/kube-apiserver" "$XLB_PREBUILT/etcd" "$kdir/"
	install -m 0644 "$XLB_PREBUILT/stamp" "$kdir/stamp"
	echo "provision: prebuilt binaries in /xlb/bin and $kdir; kernel $(uname -r)"
	/xlb/bin/xlb version || true
	exit 0
fi

# bookworm-backports: a Go that can fetch the toolchain go.mod names, and a newer kernel.
echo "deb http://deb.debian.org/debian bookworm-backports main" >/etc/apt/sources.list.d/bookworm-backports.list
apt-get update -q
DEBIAN_FRONTEND=noninteractive apt-get install -y -q -t bookworm-backports golang-1.23-go linux-image-amd64
DEBIAN_FRONTEND=noninteractive apt-get install -y -q make

# Debian's Go defaults to GOTOOLCHAIN=local; with auto it downloads the toolchain go.mod asks
# for from the Go module proxy (golang.org/toolchain).
cat >/etc/profile.d/xlb-go.sh <<'PROFILE'
export PATH="/usr/lib/go-1.23/bin:$PATH"
export GOTOOLCHAIN=auto
PROFILE
# shellcheck source=/dev/null
. /etc/profile.d/xlb-go.sh

cd /xlb
go version
# The Debian packages of the build, the tests and the lab; the kube-apiserver and etcd binaries
# (built from the module proxy into /var/cache/xlb, about 8 minutes the first time).
make deps kube-bins
