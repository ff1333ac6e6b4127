#!/bin/bash
# Runs inside the cgroup2 test guest (chroot into the host's tree, as root), called by init with
# the run directory. Builds the cgroup layout named in RUN/layout, puts a process there, drops
# to the layout's user and runs RUN/command with bash; its output goes to RUN/output and its
# exit status to RUN/status.
#
# Layouts (cgroup paths under /sys/fs/cgroup; each parent enables cpu io memory pids for its
# children):
#   root   root in /system.slice/lfm-checks.service, as a systemd service runs
#   user   uid 1000 in /user.slice/user-1000.slice/user@1000.service/app.slice/lfm-checks.scope,
#          user@1000.service and everything below it owned by the user: systemd's Delegate=yes
#          on the user manager, where `systemd-run --user` and desktop sessions put processes
#   slurm  uid 1000 in /system.slice/slurmstepd.scope/job_1/step_0/user/task_0, `user` and
#          everything below it owned by the user: Slurm's cgroup/v2 step layout
set -u
run="$1"
# Writable scratch (init makes /run/tmp; the host's /tmp is read-only here).
tmp="${LFM_GUEST_TMP:-/tmp}"
cd /
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
cg=/sys/fs/cgroup
layout="$(cat "$run/layout")"
enable_down() {  # enable the controllers along a path, creating it
    local path="$cg" part
    for part in $(echo "$1" | tr / ' '); do
        echo "+cpu +io +memory +pids" >"$path/cgroup.subtree_control" || return 1
        path="$path/$part"
        mkdir -p "$path"
    done
}
delegate() {  # hand a cgroup and everything below it to uid 1000
    chown -R 1000:1000 "$cg/$1"
}
user=0
case "$layout" in
    root)
        place=system.slice/lfm-checks.service
        enable_down "$place" ;;
    user)
        place=user.slice/user-1000.slice/user@1000.service/app.slice/lfm-checks.scope
        enable_down "$place"
        delegate user.slice/user-1000.slice/user@1000.service
        user=1000 ;;
    slurm)
        place=system.slice/slurmstepd.scope/job_1/step_0/user/task_0
        enable_down "$place"
        mkdir -p "$cg/system.slice/slurmstepd.scope/job_1/step_0/slurm"
        delegate system.slice/slurmstepd.scope/job_1/step_0/user
        user=1000 ;;
    *)
        echo "unknown layout $layout" >"$run/output"
        echo 125 >"$run/status"
        exit 0 ;;
esac

# A scratch block device (virtio disk) with ext4, so io.stat has real block I/O to count.
scratch=
if [ -b /dev/vda ] && mkfs.ext4 -q -F /dev/vda >/dev/null 2>&1; then
    mkdir -p "$tmp/scratch" && mount -t ext4 /dev/vda "$tmp/scratch" && chown "$user:$user" "$tmp/scratch" && scratch="$tmp/scratch"
fi
mkdir -p "$tmp/home" && chown "$user:$user" "$tmp/home"

{
    echo "kernel=$(uname -r)"
    echo "uptime_before_command=$(cut -d' ' -f1 /proc/uptime)"
    echo "root_controllers=$(cat $cg/cgroup.controllers)"
} >"$run/guest-info"

# The run directory lies in the checkout, which the layout's user may not reach (a checkout in
# a 0700 temporary directory): the command runs from a copy of its own.
cp "$run/command" "$tmp/command" && chmod 644 "$tmp/command"

env -i PATH="$PATH" HOME="$tmp/home" TMPDIR="$tmp" LANG=C.UTF-8 \
    LFM_GUEST_LAYOUT="$layout" LFM_GUEST_SCRATCH="$scratch" LFM_GUEST_CGROUP="/$place" \
    bash -c '
        echo $$ >"$1/cgroup.procs" || exit 124
        if [ "$2" = 0 ]; then exec bash "$3"; fi
        exec setpriv --reuid="$2" --regid="$2" --clear-groups -- bash "$3"
    ' _ "$cg/$place" "$user" "$tmp/command" >"$run/output" 2>&1 </dev/null
echo $? >"$run/status"
echo "uptime_after_command=$(cut -d' ' -f1 /proc/uptime)" >>"$run/guest-info"
sync
