"""One-shot convergence check for the three-node compose federation; exits 0 when every node holds the same set.

Each argument is NAME=URL=DATA (the node's URL and its data volume mounted here). For each node: wait until it
is healthy, create an agent on its data folder, post one entry through its REST API. Then poll
`bbs digest` on every data folder until all digests are equal and hold every posted entry, or time out.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import urllib.request


def bbs(*args: str) -> str:
    return subprocess.run(["bbs", *args], check=True, capture_output=True, text=True).stdout


def wait_healthy(url: str, deadline: float) -> None:
    while True:
        try:
            with urllib.request.urlopen(url + "/healthz", timeout=3) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"check: {url} never became healthy")
        time.sleep(1)


def post_entry(url: str, api_key: str, content: str) -> str:
    body = json.dumps({"entry_type": "finding", "performative": "inform", "content": content}).encode()
    request = urllib.request.Request(
        url + "/v1/entries",
        data=body,
        method="POST",
        headers={"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as resp:
        return str(json.loads(resp.read())["record_hash"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--timeout", type=float, default=180.0)
    parser.add_argument("nodes", nargs="+", help="NAME=URL=DATA")
    args = parser.parse_args()
    deadline = time.monotonic() + args.timeout
    nodes = [tuple(spec.split("=", 2)) for spec in args.nodes]
    for _name, url, _data in nodes:
        wait_healthy(url, deadline)
    posted: list[str] = []
    keys: dict[str, str] = {}
    for name, url, data in nodes:
        created = json.loads(bbs("agent", "create", f"check-{name}-{int(time.time())}", "--data", data, "--json"))
        keys[name] = created["api_key"]
        posted.append(post_entry(url, keys[name], f"convergence check from {name} at {time.time()}"))
        print(f"check: posted {posted[-1][:12]} on {name}", flush=True)
    digests: dict[str, dict[str, object]] = {}
    while time.monotonic() < deadline:
        digests = {name: json.loads(bbs("digest", "--data", data, "--json")) for name, _url, data in nodes}
        same = len({(d["count"], d["sha256"]) for d in digests.values()}) == 1
        if same and all(has_entry(url, keys[name], h) for name, url, _data in nodes for h in posted):
            print(f"check: converged: {json.dumps(digests)}", flush=True)
            return 0
        time.sleep(1)
    print(f"check: NOT converged within {args.timeout}s: {json.dumps(digests)}", file=sys.stderr)
    return 1


def has_entry(url: str, api_key: str, record_hash: str) -> bool:
    request = urllib.request.Request(url + f"/v1/entries/{record_hash}", headers={"Authorization": f"Bearer {api_key}"})
    try:
        with urllib.request.urlopen(request, timeout=5) as resp:
            return resp.status == 200
    except OSError:
        return False


if __name__ == "__main__":
    sys.exit(main())
