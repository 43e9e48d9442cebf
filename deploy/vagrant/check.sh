#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# check.sh (`make vagrant-check`) proves the Vagrant lab on this machine: it installs Vagrant,
# vagrant-libvirt and QEMU from apt, builds the box if missing (build-box.sh), builds the heavy
# binaries on the host (`make vagrant-prebuilt`), starts libvirtd if it is not running, then
# `vagrant up --provider libvirt` phase by phase (create and boot, provision, the lab's
# demonstration), checks the demonstration's output for real forwarding, and tears everything
# down (the VM, the management network, libvirt's iptables chains, the daemons it started),
# also when a phase fails. Too heavy for CI; needs root. Each phase's wall time is printed.
#
#   XLB_VAGRANT_CHECK_DIR   state and logs (default /var/cache/xlb/vagrant)
#   XLB_DEMO_FLAGS          extra flags for the demonstration's xlb-lab (e.g. "--mode file")
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
state="${XLB_VAGRANT_CHECK_DIR:-/var/cache/xlb/vagrant}"
box=xlb/bookworm64
boxfile="$state/xlb-bookworm64.box"
net=xlb-vagrant
# vagrant-libvirt names the domain after the directory (its default_prefix).
dom="$(basename "$repo")_default"
log="$state/check.log"
mkdir -p "$state"
: >"$log"

say() { echo "vagrant-check: $*" | tee -a "$log" >&2; }
phase_start=0
phase() { phase_name="$1"; phase_start=$SECONDS; say "== $1 ($(date -u +%H:%M:%S) UTC)"; }
phase_end() { say "== $phase_name: $((SECONDS - phase_start)) s"; }

# Vagrant's state outside the checkout (even `vagrant box list` makes .vagrant/ in the cwd).
export VAGRANT_CWD="$repo" VAGRANT_DOTFILE_PATH="$state/dot" VAGRANT_DEFAULT_PROVIDER=libvirt
cd "$state"

phase "apt packages"
pkgs=(vagrant vagrant-libvirt libvirt-daemon-system libvirt-daemon-driver-qemu libvirt-clients
	qemu-system-x86 qemu-utils mmdebstrap dnsmasq-base iptables extlinux syslinux-common rsync)
if ! dpkg -s "${pkgs[@]}" >/dev/null 2>&1; then
	apt-get update -q
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${pkgs[@]}"
fi
phase_end

phase "box"
if [[ ! -f "$boxfile" ]]; then
	"$repo/deploy/vagrant/build-box.sh" "$boxfile"
fi
if ! vagrant box list 2>/dev/null | grep -q "^$box "; then
	vagrant box add --name "$box" "$boxfile"
fi
phase_end

phase "host binaries"
make -C "$repo" vagrant-prebuilt VAGRANT_PREBUILT="$state/prebuilt"
phase_end

# libvirt without systemd as PID 1: the daemons by hand, stopped again at the end.
started=()
if ! virsh -c qemu:///system version >/dev/null 2>&1; then
	mkdir -p /run/libvirt
	# libvirt's "default" network is 192.168.122.0/24: never started here (only 198.18.0.0/15).
	rm -f /etc/libvirt/qemu/networks/autostart/default.xml
	pgrep -x virtlogd >/dev/null || { virtlogd -d; started+=(/run/virtlogd.pid); }
	libvirtd -d
	started+=(/run/libvirtd.pid)
	for _ in $(seq 50); do virsh -c qemu:///system version >/dev/null 2>&1 && break; sleep 0.2; done
fi

export XLB_VAGRANT_BOX="$box" XLB_VAGRANT_PREBUILT="$state/prebuilt"
export LIBVIRT_DEFAULT_URI=qemu:///system

teardown() {
	rc=$?
	set +e
	phase "teardown"
	vagrant destroy -f >>"$log" 2>&1
	virsh net-destroy "$net" >/dev/null 2>&1
	virsh net-undefine "$net" >/dev/null 2>&1
	for pid in "${started[@]}"; do
		[[ -f "$pid" ]] && kill "$(cat "$pid")" 2>/dev/null
	done
	sleep 2
	# libvirt's network rules outlive libvirtd: empty and remove its chains.
	for t in filter nat mangle; do
		for c in $(iptables -t "$t" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^LIBVIRT_/ {print $2}'); do
			iptables -t "$t" -S | awk -v c="$c" '$1 == "-A" && $0 ~ "-j " c "$" {sub("^-A", "-D"); print}' |
				while read -r rule; do eval "iptables -t $t $rule"; done
			iptables -t "$t" -F "$c"
		done
		for c in $(iptables -t "$t" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^LIBVIRT_/ {print $2}'); do
			iptables -t "$t" -X "$c"
		done
	done
	phase_end
	if [[ $rc == 0 ]]; then say "PASS (log: $log)"; else say "FAIL (rc $rc; log: $log)"; fi
	exit $rc
}
trap teardown EXIT

# Under TCG the guest kernel now and then hangs early in boot (one vCPU spinning at one
# address, no DHCP request, seen once in three boots here): a domain without a DHCP lease
# BOOT_RESET_AFTER seconds after it started is reset, at most twice.
boot_watchdog() {
	local after="${BOOT_RESET_AFTER:-240}" resets=0 since=""
	while sleep 5; do
		if ! virsh domstate "$dom" 2>/dev/null | grep -q running; then since=""; continue; fi
		[[ -n "$since" ]] || since=$SECONDS
		virsh net-dhcp-leases "$net" 2>/dev/null | grep -q 198\. && return 0
		if ((SECONDS - since > after && resets < 2)); then
			say "no DHCP lease $after s after the domain started: virsh reset (TCG boot hang)"
			virsh reset "$dom" >/dev/null
			resets=$((resets + 1))
			since=$SECONDS
		fi
	done
}

phase "vagrant up (create, boot, copy in)"
boot_watchdog &
watchdog=$!
vagrant up --provider libvirt --no-provision 2>&1 | tee -a "$log"
kill "$watchdog" 2>/dev/null || true
phase_end

phase "provision (setup: prebuilt binaries)"
vagrant provision --provision-with setup 2>&1 | tee -a "$log"
phase_end

phase "the lab's demonstration"
vagrant provision --provision-with lab 2>&1 | tee "$state/demo.log" | tee -a "$log"
phase_end

# Real forwarding: HTTP answered by pods through the VIP, new connections spread over pods
# (file mode: "200 new connections ... answered by: p1 33, p2 47, ..."; Kubernetes mode: each
# Service's requests "-> pods p4@n2, p5@n1, p1@n1"), the gateways' datapath counters, xlb-lab's
# own verdict, and nothing failed.
grep -Eq 'GET .* -> (pod p[0-9]+ on node|pods p[0-9]+@n[0-9]+)' "$state/demo.log"
grep -Eq 'answered by: |-> pods p[0-9]+@n[0-9]+, p[0-9]+@n[0-9]+' "$state/demo.log"
grep -q 'packets' "$state/demo.log"
grep -q 'Everything answered through the VIPs.' "$state/demo.log"
! grep -q 'FAILED' "$state/demo.log"
say "the demonstration forwarded through the VIP (output: $state/demo.log)"
