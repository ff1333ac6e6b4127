#!/usr/bin/env bash
# Prepare the pure cgroup v2 test guest: QEMU and busybox from Debian's registry, Debian's kernel
# unpacked (not installed), and an initramfs with busybox, the virtio/9p modules and
# tests/cgroup2host/init. Everything lands in CACHE (default target/cgroup2host) and is reused
# while the kernel version and the init script are unchanged.
#
# Prints `KERNEL=... INITRD=...` on success. Exit 3 with a reason on stderr when something cannot
# be installed or found (the caller prints it as the skip reason).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${CACHE:-$here/../../target/cgroup2host}"
mkdir -p "$cache"
cache="$(cd "$cache" && pwd)"
fail() { echo "cgroup2host setup: $*" >&2; exit 3; }

# One setup at a time (cargo runs test binaries one after another, but tests inside one run in
# threads, and two checkouts may share a cache).
exec 9>"$cache/.lock"
flock 9

need_packages=()
command -v qemu-system-x86_64 >/dev/null || need_packages+=(qemu-system-x86)
if ! dpkg -s busybox-static >/dev/null 2>&1; then need_packages+=(busybox-static); fi
if [ ${#need_packages[@]} -gt 0 ]; then
    [ "$(id -u)" = 0 ] || fail "needs ${need_packages[*]} installed (run as root to install them)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >"$cache/apt-update.log" 2>&1 || fail "apt-get update failed (see $cache/apt-update.log)"
    apt-get install -y -q --no-install-recommends "${need_packages[@]}" >"$cache/apt-install.log" 2>&1 \
        || fail "apt-get install ${need_packages[*]} failed (see $cache/apt-install.log)"
fi
busybox=/bin/busybox
[ -x "$busybox" ] || fail "busybox-static installed but /bin/busybox is missing"

# The kernel: linux-image-amd64's current dependency, downloaded and unpacked once.
kpkg="${LFM_GUEST_KERNEL_PACKAGE:-}"
if [ -z "$kpkg" ]; then
    if [ -f "$cache/kernel-package" ]; then
        kpkg="$(cat "$cache/kernel-package")"
    else
        kpkg="$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')"
        if [ -z "$kpkg" ]; then
            apt-get update -q >"$cache/apt-update.log" 2>&1 || true
            kpkg="$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')"
        fi
        [ -n "$kpkg" ] || fail "apt-cache knows no linux-image-amd64 (no Debian package index?)"
        echo "$kpkg" >"$cache/kernel-package"
    fi
fi
kdir="$cache/$kpkg"
if [ ! -f "$kdir/.complete" ]; then
    rm -rf "$kdir" "$cache/download"
    mkdir -p "$cache/download"
    (cd "$cache/download" && apt-get download -q "$kpkg" >"$cache/apt-download.log" 2>&1) \
        || fail "apt-get download $kpkg failed (see $cache/apt-download.log)"
    dpkg-deb -x "$cache"/download/*.deb "$kdir" || fail "dpkg-deb -x of $kpkg failed"
    rm -rf "$cache/download"
    touch "$kdir/.complete"
fi
vmlinuz="$(ls "$kdir"/boot/vmlinuz-* 2>/dev/null | head -1)"
[ -n "$vmlinuz" ] || fail "no boot/vmlinuz-* in $kpkg"
kver="${vmlinuz##*/vmlinuz-}"
moddir="$kdir/lib/modules/$kver"

# The initramfs: rebuilt when the init script or the kernel changes.
modules="virtio_ring virtio virtio_pci_legacy_dev virtio_pci_modern_dev virtio_pci netfs fscache 9pnet 9pnet_virtio 9p virtio_blk crc16 mbcache jbd2 crc32c_generic libcrc32c ext4"
stamp="$kver $(sha256sum "$here/init" | cut -d' ' -f1) $modules"
initrd="$cache/initrd-$kver.gz"
if [ ! -f "$initrd" ] || [ "$(cat "$initrd.stamp" 2>/dev/null)" != "$stamp" ]; then
    tree="$(mktemp -d "$cache/initrd.XXXXXX")"
    trap 'rm -rf "$tree"' EXIT
    mkdir -p "$tree"/{bin,dev,proc,sys,mnt,modules}
    cp "$busybox" "$tree/bin/busybox"
    for tool in sh mount umount insmod mkdir cat echo chroot sleep ls; do ln -s busybox "$tree/bin/$tool"; done
    : >"$tree/modules/order"
    for m in $modules; do
        src="$(find "$moddir/kernel" -name "$m.ko*" | head -1)"
        [ -n "$src" ] || continue  # built into this kernel
        case "$src" in
            *.xz) xz -dc "$src" >"$tree/modules/$m.ko" ;;
            *.zst) zstd -qdc "$src" >"$tree/modules/$m.ko" ;;
            *.gz) gzip -dc "$src" >"$tree/modules/$m.ko" ;;
            *) cp "$src" "$tree/modules/$m.ko" ;;
        esac
        echo "$m" >>"$tree/modules/order"
    done
    cp "$here/init" "$tree/init"
    chmod +x "$tree/init"
    (cd "$tree" && find . | "$busybox" cpio -o -H newc 2>/dev/null | gzip -1) >"$initrd.tmp"
    mv "$initrd.tmp" "$initrd"
    echo "$stamp" >"$initrd.stamp"
    rm -rf "$tree"
fi
echo "KERNEL=$vmlinuz"
echo "INITRD=$initrd"
