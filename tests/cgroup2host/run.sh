#!/usr/bin/env bash
# Run a command in a pure cgroup v2 guest (QEMU, software emulation) that sees this machine's
# whole file tree read-only, and print its output; exit with its exit status.
#
#   tests/cgroup2host/run.sh LAYOUT COMMAND [ARG...]
#
# LAYOUT is root, user or slurm (see guest.sh: which cgroup the command starts in, as whom).
# COMMAND runs with bash in the guest, cwd /, a writable tmpfs as TMPDIR (/run/tmp; the
# host's /tmp stays visible, read-only), and LFM_GUEST_LAYOUT,
# LFM_GUEST_CGROUP (its starting cgroup) and LFM_GUEST_SCRATCH (an ext4 on a virtio disk, for
# block I/O) in its environment. Paths must be readable by the layout's user (uid 1000 for user
# and slurm: nothing under /root).
#
# Exit 3: the guest could not be prepared (setup.sh says why on stderr); exit 4: the guest booted
# but reported no status (the console log is printed on stderr and kept under CACHE/hung/; the
# kernel's warnings reach the console, so a stall shows there). Environment: CACHE (default
# target/cgroup2host), LFM_GUEST_MEMORY (MiB, default 1024), LFM_GUEST_CPUS (default 2),
# LFM_GUEST_TIMEOUT (seconds before a hung guest is stopped, default 600).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
[ $# -ge 2 ] || { echo "usage: $0 root|user|slurm COMMAND [ARG...]" >&2; exit 2; }
layout="$1"; shift
eval "$(bash "$here/setup.sh")"
cache="${CACHE:-$here/../../target/cgroup2host}"
cache="$(cd "$cache" && pwd)"
mkdir -p "$cache/runs"
run="$(mktemp -d "$cache/runs/$layout.XXXXXX")"
chmod 755 "$run"
trap 'rm -rf "$run"' EXIT
echo "$layout" >"$run/layout"
printf '%q ' exec "$@" >"$run/command"
echo >>"$run/command"
truncate -s 512M "$run/scratch.img"

started=$(date +%s.%N)
set +e
timeout "${LFM_GUEST_TIMEOUT:-600}" qemu-system-x86_64 -accel tcg -m "${LFM_GUEST_MEMORY:-1024}" -smp "${LFM_GUEST_CPUS:-2}" \
    -nographic -no-reboot -nodefaults -serial "file:$run/console.log" \
    -kernel "$KERNEL" -initrd "$INITRD" \
    -append "console=ttyS0 panic=-1 quiet loglevel=5 lfm.out=$run lfm.guest=$here/guest.sh" \
    -virtfs "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap" \
    -virtfs "local,path=$run,mount_tag=out,security_model=none" \
    -drive "file=$run/scratch.img,format=raw,if=virtio,cache=unsafe" \
    </dev/null >"$run/qemu.log" 2>&1
qemu_status=$?
set -e
ended=$(date +%s.%N)
cat "$run/output" 2>/dev/null || true
{
    echo "cgroup2host: layout $layout, guest wall time $(awk "BEGIN {printf \"%.1f\", $ended - $started}") s"
    cat "$run/guest-info" 2>/dev/null || true
} >&2
if [ ! -s "$run/status" ]; then
    # Kept (the run directory goes): a guest that stops answering is rare, and a test that boots
    # it again and passes hides this output.
    kept="$cache/hung/$layout.$(date -u +%Y%m%dT%H%M%S).$$"
    mkdir -p "$kept" || true
    cp "$run/console.log" "$run/qemu.log" "$run/output" "$kept/" 2>/dev/null || true
    echo "cgroup2host: the guest reported no exit status (qemu exit $qemu_status; logs kept in $kept); console and qemu log:" >&2
    tail -n 60 "$run/console.log" "$run/qemu.log" >&2 || true
    exit 4
fi
exit "$(cat "$run/status")"
