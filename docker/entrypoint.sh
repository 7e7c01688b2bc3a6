#!/bin/sh
# Container entrypoint. `serve` (the default): create the node's key and database on first start
# (the admin token is printed once, into the container log), join the peers named in BBS_JOIN in the
# background, then exec `bbs serve` so it is PID 1 and receives SIGTERM. Anything else runs `bbs ARGS`.
# BBS_PROCESS_OF names the folder of a running process of a node on PostgreSQL (another container's volume,
# mounted): on first start this container becomes another process of that node (`bbs init --join`) instead.
set -eu
if [ "${1:-serve}" = "serve" ]; then
    [ "$#" -gt 0 ] && shift
    if [ -n "${BBS_PROCESS_OF:-}" ] && [ ! -f "$BBS_DATA/node.key" ]; then
        bbs init --data "$BBS_DATA" --join "$BBS_PROCESS_OF"
    fi
    bbs init --data "$BBS_DATA"
    if [ -n "${BBS_JOIN:-}" ]; then
        python3 /src/docker/join_peers.py --data "$BBS_DATA" $BBS_JOIN &
    fi
    exec bbs serve "$@"
fi
exec bbs "$@"
