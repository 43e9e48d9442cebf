#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The Vagrant VM's last provisioning step: the lab's demonstration (build a site, show it
# forwarding, remove it). With binaries put in place by provision.sh (XLB_VAGRANT_PREBUILT) they
# are run as they are; otherwise `make lab DEMO=1` builds them with the guest's Go.
#   XLB_DEMO_FLAGS      extra xlb-lab flags (e.g. "--mode file")
#   XLB_LAB_TIME_SCALE  xlb-lab --time-scale: the lab's start-up bounds times N (the Vagrantfile
#                       sets 6 under QEMU's software emulation)
set -eu
cd /xlb
if [ -f /opt/xlb-prebuilt/stamp ] && [ -x bin/xlb ] && [ -x bin/xlb-lab ]; then
	mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf
	echo "demo: kernel $(uname -r), prebuilt $(bin/xlb version | head -1)"
	# shellcheck disable=SC2086
	exec ./bin/xlb-lab demo --xlb bin/xlb --time-scale "${XLB_LAB_TIME_SCALE:-1}" ${XLB_DEMO_FLAGS:-}
fi
# shellcheck source=/dev/null
. /etc/profile.d/xlb-go.sh
exec make lab DEMO=1 LAB_FLAGS="--time-scale ${XLB_LAB_TIME_SCALE:-1} ${XLB_DEMO_FLAGS:-}"
