#!/bin/sh
# Provisions the Vagrant VM (see ../../Vagrantfile) as the xlb lab and test host: what a fresh
# Debian 12 machine needs beyond `make deps`. Idempotent: `vagrant provision` runs it again.
set -eu

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
