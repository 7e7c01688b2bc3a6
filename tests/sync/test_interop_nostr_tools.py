"""Interop oracle: nostr-tools' NIP-77 initiator (under Node.js) against our responder, and our initiator
against the same responder, must send byte-identical messages every round and learn the same differences."""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from sync.negentropy import Negentropy, VectorStorage

# One worker runs this module: its fixture may `npm install` into tests/interop (pytest-xdist, --dist loadgroup).
pytestmark = pytest.mark.xdist_group("npm-interop")

INTEROP = Path(__file__).resolve().parents[1] / "interop"


@pytest.fixture(scope="module")
def node_client() -> Path:
    """The JS initiator, with nostr-tools installed from the npm registry on first use (CI installs it too)."""
    assert shutil.which("node"), "Node.js is required for the negentropy interop test"
    if not (INTEROP / "node_modules" / "nostr-tools" / "lib" / "esm" / "nip77.js").exists():
        subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--silent"], cwd=INTEROP, check=True, timeout=600)
    return INTEROP / "negentropy_client.mjs"


def _items(n: int, seed: int, ts_span: int) -> list[tuple[int, bytes]]:
    rng = random.Random(seed)
    return [(1_600_000_000 + rng.randrange(ts_span), hashlib.sha256(f"{seed}/{i}".encode()).digest()) for i in range(n)]


@pytest.mark.parametrize(
    ("n", "ts_span", "frame", "seed"),
    [(0, 10, 60_000, 1), (20, 10, 60_000, 2), (500, 1000, 60_000, 3), (3000, 5, 60_000, 4), (6000, 10**6, 4096, 5)],
)
def test_messages_match_nostr_tools_byte_for_byte(
    node_client: Path, n: int, ts_span: int, frame: int, seed: int
) -> None:
    items = _items(n, seed, ts_span)
    rng = random.Random(seed)
    where = [rng.choice(["both", "both", "client", "server"]) for _ in items]
    client = [it for it, w in zip(items, where, strict=True) if w != "server"]
    server = [it for it, w in zip(items, where, strict=True) if w != "client"]
    responder = Negentropy(VectorStorage(server), frame_size_limit=frame)
    ours = Negentropy(VectorStorage(client), frame_size_limit=frame)
    proc = subprocess.Popen(
        ["node", str(node_client)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=INTEROP
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(json.dumps({"items": [[ts, i.hex()] for ts, i in client], "frame": frame}) + "\n")
        proc.stdin.flush()
        js = json.loads(proc.stdout.readline())
        mine: bytes | None = ours.initiate()
        have: list[bytes] = []
        need: list[bytes] = []
        rounds = 0
        while True:
            assert js["msg"] == (mine.hex() if mine is not None else None), f"round {rounds} differs"
            if mine is None:
                break
            reply = responder.reconcile(mine)
            assert reply is not None
            proc.stdin.write(json.dumps({"msg": reply.hex()}) + "\n")
            proc.stdin.flush()
            js = json.loads(proc.stdout.readline())
            mine = ours.reconcile(reply, have, need)
            rounds += 1
        assert sorted(js["have"]) == sorted(h.hex() for h in have)
        assert sorted(js["need"]) == sorted(h.hex() for h in need)
        assert {h.hex() for h in have} == {i.hex() for _, i in client} - {i.hex() for _, i in server}
        assert {h.hex() for h in need} == {i.hex() for _, i in server} - {i.hex() for _, i in client}
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
