#!/bin/sh
# node.sh NODES VENV HIDDEN COMMAND...: run COMMAND as one "node" of the multi-node test.
# It claims the first free NODES/node-K, then runs in a mount namespace of its own: a private
# /tmp, each of the colon-separated HIDDEN directories (the submit side's: its venv, home,
# project, the directories its layout names outside the venv, lfm sources) under an empty
# tmpfs, and an environment holding only VENV (python3, the engine, lfm's client and binary),
# with NODES/node-K/cache as its node-local storage.
set -eu
nodes=$1 venv=$2 hidden=$3
shift 3
i=0
while :; do
  mkdir -p "$nodes/node-$i"
  mkdir "$nodes/node-$i/claimed" 2>/dev/null && break
  i=$((i + 1))
done
node="$nodes/node-$i"
mkdir -p "$node/cache" "$node/home"
echo $$ > "$node/claimed/pid"
export NODE="$node" VENV="$venv"
exec unshare --mount --propagation private /bin/sh -c '
  set -eu
  mount -t tmpfs tmpfs /tmp
  IFS=:
  # (those under /tmp are hidden already by the private /tmp)
  for dir in $1; do if [ -d "$dir" ]; then mount -t tmpfs tmpfs "$dir"; fi; done
  unset IFS
  shift
  # A node starts its workers in a directory of its own (the submit side'"'"'s may be hidden).
  cd "$NODE/home"
  exec env -i PATH="$VENV/bin:/usr/bin:/bin" HOME="$NODE/home" LFM_NODE_CACHE="$NODE/cache" \
    LFM_IDLE_TIMEOUT=30 LFM_SLOTS=2 "$@"
' sh "$hidden" "$@"
