"""Peer this node with others on first start: learn each peer's node id from its /v1/node, then `bbs peer add`.

Used by the container entrypoint (BBS_JOIN="http://node-b:8420 http://node-c:8420"). Trust on first use:
the peer's id is taken from the peer itself, which is fine on a private compose network; across networks,
add peers by hand with an id you got out of band (`bbs peer add URL --key DID`).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import urllib.request


def node_id(url: str, deadline: float) -> str | None:
    """The peer's did:key, retrying until it answers or the deadline passes."""
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url.rstrip("/") + "/v1/node", timeout=3) as resp:
                return str(json.loads(resp.read())["node_id"])
        except (OSError, ValueError, KeyError):
            time.sleep(1)
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", required=True)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("urls", nargs="+")
    args = parser.parse_args()
    deadline = time.monotonic() + args.timeout
    failed = 0
    for url in args.urls:
        did = node_id(url, deadline)
        if did is None:
            print(f"join: {url} did not answer; add it later with bbs peer add", file=sys.stderr)
            failed += 1
            continue
        done = subprocess.run(["bbs", "peer", "add", url, "--key", did, "--data", args.data], check=False)
        failed += done.returncode != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
