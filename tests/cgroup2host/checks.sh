#!/bin/bash
# The cgroup v2 checks, run inside the guest by tests/cgroup2.rs through run.sh (one boot per
# layout). Prints one JSON line per run: {"check": NAME, "status": lfm's exit status,
# "report": the Report, ...facts the shell saw}. tests/cgroup2.rs asserts on them.
#
#   checks.sh LFM WORKLOAD FAULTS_PY
set -u
lfm="$1"
workload="$2"
faults="$3"
cg=/sys/fs/cgroup
own="$cg$LFM_GUEST_CGROUP"
parent="$(dirname "$own")"
reports="$(mktemp -d)"
n=0

# guard COMMAND...: COMMAND, killed after LFM_CHECK_TIMEOUT seconds (default 240; a check takes
# seconds). A hung check then shows as status 137 with the guest's processes printed, instead of
# a guest that never reports.
guard() {
    timeout -s KILL "${LFM_CHECK_TIMEOUT:-240}" "$@"
    local status=$?
    if [ "$status" = 137 ]; then
        echo "HUNG after ${LFM_CHECK_TIMEOUT:-240}s: $*"
        ps -eo pid,ppid,stat,wchan:32,etime,args | grep -v ' \[' || true
    fi
    return "$status"
}

# emit NAME STATUS REPORT [EXTRA]: one JSON line; EXTRA is `"key": value, ...`.
emit() {
    local report
    report="$(tr -d '\n' <"$3" 2>/dev/null)"
    printf '{"check": "%s", "status": %s, "report": %s%s}\n' "$1" "$2" "${report:-null}" "${4:+, $4}"
}
# run NAME [LFM RUN ARGS] -- COMMAND...: lfm run with a report, then emit.
run() {
    local name="$1"; shift
    n=$((n + 1))
    local report="$reports/$n.json"
    guard "$lfm" run --quiet --report "$report" "$@"
    emit "$name" $? "$report"
}
# alone SCOPE NAME ARGS...: like run, with lfm the only process of a new cgroup SCOPE, as
# `systemd-run --scope` or `srun` start a command.
alone() {
    local scope="$1" name="$2"; shift 2
    n=$((n + 1))
    local report="$reports/$n.json"
    mkdir -p "$scope"
    guard bash -c 'echo $$ >"$1/cgroup.procs" || exit 124; shift; exec "$@"' _ "$scope" \
        "$lfm" run --quiet --report "$report" "$@"
    emit "$name" $? "$report"
}

run memory_limit --memory 100M -- "$workload" touch 300 2000
run memory_peak -- "$workload" touch 64 300
run oom_kill_of_a_child --memory 100M -- bash -c "$workload touch 300 0; exit 0"
run cpu_max --cores 0.5 -- "$workload" busy 2 2500
run pids_max --processes 20 --wall 30 -- "$workload" forkbomb

if [ -n "$LFM_GUEST_SCRATCH" ]; then
    run io_write_200mib -- dd if=/dev/zero of="$LFM_GUEST_SCRATCH/io.bin" bs=1M count=200 conv=fsync status=none
    rm -f "$LFM_GUEST_SCRATCH/io.bin"
fi

pidfile="$reports/daemon.pid"
n=$((n + 1))
guard "$lfm" run --quiet --report "$reports/$n.json" --wall 2 -- "$workload" doublefork "$pidfile"
status=$?
daemon="$(cat "$pidfile" 2>/dev/null || echo 0)"
alive=false
if [ "$daemon" != 0 ] && kill -0 "$daemon" 2>/dev/null; then alive=true; fi
emit kill_a_double_forked_daemon "$status" "$reports/$n.json" "\"daemon_pid\": $daemon, \"daemon_alive\": $alive"

# lfm alone in its cgroup: it moves itself into a leaf and enables the controllers there.
alone "$parent/lfm-alone.scope" alone_memory_limit --memory 100M -- "$workload" touch 300 2000

# What io.stat itself counts for the same write, in a cgroup of our own (the alone scope now
# hands out the io controller): the kernel side of io_write_200mib.
if [ -n "$LFM_GUEST_SCRATCH" ]; then
    probe="$parent/lfm-alone.scope/io-probe"
    mkdir -p "$probe"
    bash -c 'echo $$ >"$1/cgroup.procs" || exit 124
        dd if=/dev/zero of="$2/probe.bin" bs=1M count=200 conv=fsync status=none' _ "$probe" "$LFM_GUEST_SCRATCH"
    wbytes="$(awk '{for (i = 2; i <= NF; i++) if ($i ~ /^wbytes=/) {sub("wbytes=", "", $i); s += $i}} END {print s + 0}' "$probe/io.stat")"
    rm -f "$LFM_GUEST_SCRATCH/probe.bin"
    rmdir "$probe"
    printf '{"check": "io_stat_probe", "status": 0, "report": null, "wbytes": %s}\n' "$wbytes"
fi

# 8 runs at once, started from this shell (beside it) and alone in one new cgroup.
# Each run's exit status and the end of its stderr go with its line: a missing report says why.
said() { # FILE: the file's last 600 bytes as a JSON string
    if command -v python3 >/dev/null; then
        python3 -c 'import json, sys; print(json.dumps(open(sys.argv[1], errors="replace").read()[-600:]))' "$1"
    else
        echo '"(no python3 to quote it)"'
    fi
}
pids=()
for i in 1 2 3 4 5 6 7 8; do
    guard "$lfm" run --quiet --report "$reports/beside-$i.json" --memory 100M -- "$workload" touch 40 500 \
        2>"$reports/beside-$i.err" &
    pids+=($!)
done
for i in 1 2 3 4 5 6 7 8; do
    wait "${pids[$((i - 1))]}"
    emit concurrent_beside $? "$reports/beside-$i.json" "\"stderr\": $(said "$reports/beside-$i.err")"
done
mkdir -p "$parent/lfm-alone8.scope"
# All 8 enter the scope before any lfm starts, as srun or systemd place a step's tasks: once the
# first lfm has made the scope a parent (its leaf, controllers enabled) no process can join it
# (EBUSY), as for any cgroup v2 parent. Each launcher waits for one line of a FIFO this shell
# holds open, so all 8 are released at once and none blocks on a release it missed.
go="$reports/alone-go"
mkfifo "$go"
exec 3<>"$go"
pids=()
for i in 1 2 3 4 5 6 7 8; do
    guard bash -c 'echo $$ >"$1/cgroup.procs" || exit 124
        read -r _ <"$2"; shift 2; exec "$@"' _ \
        "$parent/lfm-alone8.scope" "$go" "$lfm" run --quiet --report "$reports/alone-$i.json" --memory 100M -- "$workload" touch 40 500 \
        2>"$reports/alone-$i.err" &
    pids+=($!)
done
for _ in $(seq 600); do
    [ "$(wc -l <"$parent/lfm-alone8.scope/cgroup.procs")" -ge 8 ] && break
    sleep 0.05
done
printf '\n\n\n\n\n\n\n\n' >&3
for i in 1 2 3 4 5 6 7 8; do
    wait "${pids[$((i - 1))]}"
    emit concurrent_alone $? "$reports/alone-$i.json" "\"stderr\": $(said "$reports/alone-$i.err")"
done
exec 3>&-

# Not delegated: a cgroup (and parent) lfm may not write. Root may write anything, so only for
# an ordinary user (it makes them read-only with chmod).
if [ "$(id -u)" != 0 ]; then
    ro="$parent/lfm-readonly.slice/ro.scope"
    mkdir -p "$ro"
    n=$((n + 1))
    guard bash -c 'echo $$ >"$1/cgroup.procs" || exit 124
        chmod a-w "$1" "$1/cgroup.procs" "$1/cgroup.subtree_control" "$1/.." "$1/../cgroup.procs" "$1/../cgroup.subtree_control"
        shift; exec "$@"' _ "$ro" "$lfm" run --quiet --report "$reports/$n.json" --memory 100M -- "$workload" touch 300 2000
    emit not_delegated $? "$reports/$n.json"

    # The issue's first layout: a delegated scope holding the user's shell, its parent not
    # writable. lfm moves no shell: runs without controllers, the supervisor enforces.
    slice="$parent/lfm-shell.slice"
    mkdir -p "$slice/shell.scope"
    echo "+memory +pids +cpu +io" >"$slice/cgroup.subtree_control"
    n=$((n + 1))
    guard bash -c 'echo $$ >"$1/shell.scope/cgroup.procs" || exit 124
        chmod a-w "$1" "$1/cgroup.procs" "$1/cgroup.subtree_control"
        shift; "$@"; exit $?' _ "$slice" "$lfm" run --quiet --report "$reports/$n.json" --memory 100M -- "$workload" touch 300 2000
    emit shell_in_a_delegated_scope $? "$reports/$n.json"
fi

# lfm serve: every call in a fresh cgroup of its own under the same setup (the host's Python,
# which uid 1000 can run; the zygote preloads nothing).
if [ -x /usr/bin/python3 ]; then
    replies="$reports/serve.jsonl"
    printf '%s\n' \
        '{"id": "alloc64", "function": "faults.py:alloc", "args": [64], "import_module": true}' \
        '{"id": "oom", "function": "faults.py:alloc", "args": [300], "import_module": true, "limits": {"memory": "100M"}}' |
        (cd "$(dirname "$faults")" && guard "$lfm" serve --python /usr/bin/python3 --no-history --cache-dir "$reports/cache") >"$replies"
    while read -r reply; do
        printf '{"check": "serve", "status": 0, "report": null, "reply": %s}\n' "$reply"
    done <"$replies"

    # One slot: a 300 MiB call, then 10 MiB ones, each measured alone (memory.peak reset per
    # call): three, and more (ten at most) until one has run in the large call's cgroup, back
    # in the pool once the janitor released it (however slow the emulated guest is); then a
    # reuse function's two calls in one kept process, the second's peak its own.
    replies="$reports/serve-slot.jsonl"
    : >"$replies"
    serve_slot_calls() (
        cd "$(dirname "$faults")" || exit 1
        coproc SERVE { guard "$lfm" serve --slots 1 --python /usr/bin/python3 --no-history --cache-dir "$reports/cache"; }
        ask() { # REQUEST: send it, append its reply to $replies, print the reply's cgroup
            local reply
            printf '%s\n' "$1" >&"${SERVE[1]}"
            IFS= read -r -t 240 reply <&"${SERVE[0]}" || return 1
            printf '%s\n' "$reply" >>"$replies"
            grep -o '"cgroup": *"[^"]*"' <<<"$reply" | head -n 1
        }
        call() { # ID MIB [REUSE]
            printf '{"id": "%s", "function": "faults.py:alloc_where", "args": [%s], "import_module": true%s}' \
                "$1" "$2" "${3:+, \"reuse\": true}"
        }
        large="$(ask "$(call large 300)")" || exit 1
        for i in 1 2 3 4 5 6 7 8 9 10; do
            small="$(ask "$(call "small$i" 10)")" || exit 1
            [ "$i" -ge 3 ] && [ -n "$large" ] && [ "$small" = "$large" ] && break
            sleep 0.5
        done
        ask "$(call reuse_large 300 reuse)" >/dev/null || exit 1
        ask "$(call reuse_small 10 reuse)" >/dev/null || exit 1
        eval "exec ${SERVE[1]}>&-"
        wait "$SERVE_PID"
    )
    serve_slot_calls
    while read -r reply; do
        printf '{"check": "serve_slot", "status": 0, "report": null, "reply": %s}\n' "$reply"
    done <"$replies"
fi

# Nothing left behind, nothing of this shell moved.
leftovers="$(find $cg -name 'run-*' -type d | sed 's/.*/"&"/' | paste -sd, -)"
shell_cgroup="$(sed -n 's/^0:://p' /proc/$$/cgroup)"
printf '{"check": "after", "status": 0, "report": null, "leftover_runs": [%s], "shell_cgroup": "%s", "own_procs": %s}\n' \
    "$leftovers" "$shell_cgroup" "$(wc -l <"$own/cgroup.procs")"
