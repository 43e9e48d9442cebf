#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# build-box.sh builds a Debian 12 vagrant-libvirt box from apt packages alone (no box is
# downloaded): mmdebstrap -> ext4 on a whole raw disk, booted by extlinux -> qcow2 -> box tar.
#
#   deploy/vagrant/build-box.sh [OUT]     # default OUT: /var/cache/xlb/vagrant/xlb-bookworm64.box
#
#   XLB_BOX_KERNEL=backports|stable   the kernel (default backports: what provision.sh installs
#                                     into the public box; stable: Debian 12's own 6.1)
#   XLB_BOX_MIRROR                    the Debian mirror (default http://deb.debian.org/debian)
#
# Besides a minimal Debian (systemd, ssh, sudo, rsync, the `vagrant` user with Vagrant's
# well-known insecure key, DHCP on every en* link) the box carries the packages the lab runs
# (bird2, frr, nftables, curl, ...), so that a lab VM with prebuilt binaries needs no network
# beyond the host (XLB_VAGRANT_PREBUILT in ../../Vagrantfile). Needs root; no partition devices
# (`losetup -P` makes none on some hosts): the file system covers the whole disk.
set -eu

out="${1:-/var/cache/xlb/vagrant/xlb-bookworm64.box}"
kernel="${XLB_BOX_KERNEL:-backports}"
mirror="${XLB_BOX_MIRROR:-http://deb.debian.org/debian}"
size=8G

log() { echo "build-box: $*" >&2; }

# What the build runs, from apt when missing (as check.sh does): vagrant for its insecure key,
# mmdebstrap for the root, e2fsprogs, extlinux and qemu-img for the disk.
deps="vagrant mmdebstrap e2fsprogs extlinux syslinux-common qemu-utils"
# shellcheck disable=SC2086 # deps is a list of words
if ! dpkg -s $deps >/dev/null 2>&1; then
	log "installing $deps from apt"
	apt-get update -q
	# shellcheck disable=SC2086
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $deps
fi

key=""
for k in /usr/share/rubygems-integration/all/gems/vagrant-*/keys/vagrant.pub \
	/opt/vagrant/embedded/gems/gems/vagrant-*/keys/vagrant.pub; do
	[ -f "$k" ] && key="$k"
done
[ -n "$key" ] || { log "Vagrant's keys/vagrant.pub not found (install the vagrant package)"; exit 1; }

mkdir -p "$(dirname "$out")"
work="$(mktemp -d "$(dirname "$out")/.box.XXXXXX")"
trap 'umount "$work/mnt" 2>/dev/null || true; rm -rf "$work"' EXIT INT TERM
root="$work/root"

# The lab's runtime (see DEB_PKGS and LAB_PKGS in the Makefile: the BPF toolchain is left out,
# the binaries come in built) and what Vagrant and the lab's demo drive.
pkgs="systemd-sysv,udev,dbus,openssh-server,sudo,rsync,iproute2,ifupdown,procps,kmod,ca-certificates"
pkgs="$pkgs,bird2,frr,nftables,ethtool,bpftool,curl,iputils-ping,make,util-linux,psmisc"
case "$kernel" in
backports) kpkg="linux-image-amd64/bookworm-backports" ;;
stable) kpkg="linux-image-amd64" ;;
*) log "XLB_BOX_KERNEL must be backports or stable"; exit 1 ;;
esac

log "mmdebstrap bookworm ($kernel kernel) into $root"
mmdebstrap --variant=apt --include="$pkgs,$kpkg" \
	--customize-hook='echo xlb-lab >"$1/etc/hostname"' \
	--customize-hook='printf "127.0.0.1\tlocalhost\n127.0.1.1\txlb-lab\n" >"$1/etc/hosts"' \
	--customize-hook='echo "LABEL=root / ext4 errors=remount-ro 0 1" >"$1/etc/fstab"' \
	--customize-hook='printf "[Match]\nName=en* eth*\n\n[Network]\nDHCP=yes\n" >"$1/etc/systemd/network/50-dhcp.network"' \
	--customize-hook='chroot "$1" systemctl enable systemd-networkd ssh serial-getty@ttyS0' \
	--customize-hook='chroot "$1" useradd --create-home --shell /bin/bash --groups sudo vagrant' \
	--customize-hook='echo vagrant:vagrant | chroot "$1" chpasswd' \
	--customize-hook='echo "vagrant ALL=(ALL) NOPASSWD: ALL" >"$1/etc/sudoers.d/vagrant"; chmod 0440 "$1/etc/sudoers.d/vagrant"' \
	--customize-hook="install -d -m 0700 \"\$1/home/vagrant/.ssh\"; install -m 0600 $key \"\$1/home/vagrant/.ssh/authorized_keys\"" \
	--customize-hook='chroot "$1" chown -R vagrant:vagrant /home/vagrant/.ssh' \
	--customize-hook='echo "UseDNS no" >"$1/etc/ssh/sshd_config.d/vagrant.conf"' \
	--customize-hook='rm -f "$1"/etc/ssh/ssh_host_*' \
	--customize-hook='printf "[Unit]\nDescription=SSH host keys\nBefore=ssh.service\nConditionPathExists=!/etc/ssh/ssh_host_ed25519_key\n[Service]\nType=oneshot\nExecStart=/usr/bin/ssh-keygen -A\n[Install]\nWantedBy=multi-user.target\n" >"$1/etc/systemd/system/ssh-hostkeys.service"; chroot "$1" systemctl enable ssh-hostkeys' \
	--customize-hook='rm -f "$1/etc/machine-id"; touch "$1/etc/machine-id"' \
	--customize-hook='chroot "$1" apt-get clean' \
	bookworm "$root" \
	"deb $mirror bookworm main" \
	"deb $mirror bookworm-updates main" \
	"deb ${mirror%/debian}/debian-security bookworm-security main" \
	"deb $mirror bookworm-backports main"

vmlinuz="$(cd "$root/boot" && ls vmlinuz-* | sort -V | tail -1)"
initrd="initrd.img-${vmlinuz#vmlinuz-}"
log "kernel $vmlinuz"
mkdir -p "$root/boot/extlinux"
cat >"$root/boot/extlinux/extlinux.conf" <<EOF
DEFAULT linux
TIMEOUT 1
PROMPT 0
LABEL linux
  LINUX /boot/$vmlinuz
  INITRD /boot/$initrd
  APPEND root=LABEL=root rw console=ttyS0 net.ifnames=1 quiet
EOF

log "ext4 on a whole $size disk"
truncate -s "$size" "$work/disk.raw"
mkfs.ext4 -q -L root -d "$root" "$work/disk.raw"
rm -rf "$root"
mkdir "$work/mnt"
mount -o loop "$work/disk.raw" "$work/mnt"
extlinux --install "$work/mnt/boot/extlinux" >/dev/null
umount "$work/mnt"

log "qcow2 and box"
qemu-img convert -c -O qcow2 "$work/disk.raw" "$work/box.img"
rm -f "$work/disk.raw"
echo '{"provider":"libvirt","format":"qcow2","virtual_size":8}' >"$work/metadata.json"
echo 'Vagrant.configure("2") { |config| }' >"$work/Vagrantfile"
# qcow2 is compressed already: a plain tar.
tar -C "$work" -cf "$work/box.tar" metadata.json Vagrantfile box.img
mv "$work/box.tar" "$out"
log "wrote $out ($(du -h "$out" | cut -f1))"
