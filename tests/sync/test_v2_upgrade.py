"""Issue 35's done-when, with real processes: a node of the last v2 release and a node of this release (v3) peered
both ways keep syncing public records; the v3 node also holds records the v2 node cannot store (a member a later
release adds, as `agent_type` was; a key rotation and an entry signed by the rotated key), which the v2 node
neither stores nor counts as invalid; once the v2 node's data folder is served by this release, its first
reconciliation brings that record too, and the digests are equal (docs/format-v3.md, 8.2 to 8.5).

The v2 node is the real old code: the tree of `V2_RELEASE` from git (`git archive`), run with this virtualenv's
python and the archive first on its path; the test checks that the process runs that code (its GET /v1/node has no
`sync_versions`) and not this checkout, which the editable install would otherwise import.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agent import identity_file
from scenarios.fednet import free_port
from tests.node.api_helpers import entry_record

# The last commit of main before the protocol bump: the commit branch v3-protocol started from (`git merge-base
# HEAD main` at the branch's start), i.e. the last release of sync protocol v2.
V2_RELEASE = "1e0e0a47fc18bed02a6e9fb3ed2c4bf5795b204d"
REPO = Path(__file__).resolve().parents[2]
ENV = {"BBS_SYNC_WAIT_MS": "2000", "BBS_RECONCILE_EVERY_S": "3", "BBS_LOG_LEVEL": "info"}
TIMEOUT_S = 60.0

pytestmark = pytest.mark.slow


@dataclass
class Proc:
    """One `bbs serve` process of a given release over a data folder."""

    name: str
    data: Path
    command: list[str]  # how to run `bbs` of this release
    cwd: Path
    env: dict[str, str]
    port: int = field(default_factory=free_port)
    token: str = ""
    node_id: str = ""
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def admin(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def bbs(self, *args: str) -> str:
        done = subprocess.run(
            [*self.command, *args], cwd=self.cwd, env=self.env, capture_output=True, text=True, timeout=120, check=False
        )
        assert done.returncode == 0, f"{self.name}: bbs {' '.join(args)}: {done.stderr}"
        return done.stdout

    def init(self) -> None:
        out = self.bbs("init", "--data", str(self.data))
        match = re.search(r"Admin token \(shown once, keep it safe\): (\S+)", out)
        assert match, out
        self.token = match.group(1)

    async def start(self, session: aiohttp.ClientSession) -> dict[str, Any]:
        """Serve; returns its GET /v1/node once it answers."""
        log = open(self.data.parent / f"{self.name}.log", "ab")  # noqa: SIM115 (the process writes it)
        self.proc = subprocess.Popen(
            [*self.command, "serve", "--data", str(self.data), "--port", str(self.port)],
            cwd=self.cwd,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"{self.name} exited: {self.log_text()}"
            try:
                async with session.get(self.url + "/v1/node") as resp:
                    if resp.status == 200:
                        info: dict[str, Any] = await resp.json()
                        self.node_id = info["node_id"]
                        return info
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
        raise AssertionError(f"{self.name} did not start: {self.log_text()}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=60)
        self.proc = None

    def log_text(self) -> str:
        path = self.data.parent / f"{self.name}.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    async def call(self, session: aiohttp.ClientSession, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        headers = kw.pop("headers", None) or self.admin
        async with session.request(method, self.url + path, json=body, headers=headers) as resp:
            data = await resp.json(content_type=None)
            assert resp.status < 300, f"{self.name} {method} {path}: {resp.status} {data}"
            return data

    async def has(self, session: aiohttp.ClientSession, record_hash: str) -> bool:
        async with session.get(self.url + f"/v1/entries/{record_hash}", headers=self.admin) as resp:
            return resp.status == 200

    async def peer_of(self, session: aiohttp.ClientSession, other: Proc) -> dict[str, Any]:
        listing = await self.call(session, "GET", "/v1/peers")
        return next(p for p in listing["peers"] if p["node_id"] == other.node_id)


def v2_tree(tmp_path: Path) -> Path:
    """The tree of V2_RELEASE, from this repository's git history; fails (never skips) when it is not there."""
    try:
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", "--format=tar", V2_RELEASE], capture_output=True, timeout=120
        )
    except FileNotFoundError:
        pytest.fail("git is not installed: this test needs the git history to run the last v2 release")
    if archive.returncode != 0:
        pytest.fail(
            f"commit {V2_RELEASE} (the last v2 release) is not in the git history of {REPO}: this test runs that"
            f" release from git, so it needs the full history (e.g. git fetch --unshallow): {archive.stderr!r}"
        )
    tree = tmp_path / "v2-release"
    tree.mkdir()
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(tree, filter="data")
    return tree


async def until(check: Any, what: str, timeout: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        await asyncio.sleep(0.2)


def entry_with_language(key: Any, content: str) -> dict[str, Any]:
    """An entry carrying the member `language`, which the last v2 release's schemas refuse."""
    return entry_record(key, content, created_ms=int(time.time() * 1000), language="en")


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


async def test_a_v2_node_and_a_v3_node_sync_and_the_v2_node_fetches_what_it_lacked_once_upgraded(
    tmp_path: Path, session: aiohttp.ClientSession
) -> None:
    """Wall time 15 to 20 s on the 2-core development machine (marked slow: real processes): two releases, three
    `bbs serve` processes, waits for reconciliation rounds 3 s apart."""
    tree = v2_tree(tmp_path)
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("BBS_")}
    old_env = {**base_env, **ENV, "PYTHONPATH": str(tree)}
    new_env = {**base_env, **ENV, "PYTHONPATH": str(REPO)}
    new_bbs = [sys.executable, "-m", "tests.sync.next_release"]
    old = Proc("v2", tmp_path / "v2-data", [sys.executable, "-m", "node.cli"], tree, old_env)
    new = Proc("v3", tmp_path / "v3-data", new_bbs, REPO, new_env)
    try:
        old.init()
        new.init()
        writer = json.loads(new.bbs("agent", "create", "writer", "--data", str(new.data), "--json"))
        new.bbs("agent", "export", "writer", "--data", str(new.data), "--out", str(tmp_path / "writer.id"))
        key = identity_file.load(tmp_path / "writer.id").key
        old_info = await old.start(session)
        new_info = await new.start(session)
        # the old process runs the old code, not this checkout through the editable install
        assert "sync_versions" not in old_info, old_info
        assert new_info["sync_versions"] == [2, 3]

        await old.call(session, "POST", "/v1/peers", {"url": new.url, "node_id": new.node_id})
        await new.call(session, "POST", "/v1/peers", {"url": old.url, "node_id": old.node_id})
        old_agent = await old.call(session, "POST", "/v1/agents", {"name": "old-writer"})
        new_agent = await new.call(session, "POST", "/v1/agents", {"name": "new-writer"})
        from_old = (
            await old.call(
                session,
                "POST",
                "/v1/entries",
                {"entry_type": "finding", "performative": "inform", "content": "posted on the v2 node"},
                headers={"Authorization": f"Bearer {old_agent['api_key']}"},
            )
        )["record_hash"]
        from_new = (
            await new.call(
                session,
                "POST",
                "/v1/entries",
                {"entry_type": "finding", "performative": "inform", "content": "posted on the v3 node"},
                headers={"Authorization": f"Bearer {new_agent['api_key']}"},
            )
        )["record_hash"]
        # v3-only public records of this release: a rotation of the agent's node-kept key (its key event and vouch
        # pages) and an entry it signs with the new key (`signing_key`), which no v2 node can verify
        rotated = await new.call(session, "POST", f"/v1/agents/{new_agent['agent_id']}/signing-key")
        by_new_key = await new.call(
            session,
            "POST",
            "/v1/entries",
            {"entry_type": "finding", "performative": "inform", "content": "signed by the rotated key"},
            headers={"Authorization": f"Bearer {new_agent['api_key']}"},
        )
        assert rotated["vouched"] >= 1, rotated  # the agent's document at least
        by_new_key_hash = by_new_key["record_hash"]  # were it not signed by the new key, the v2 node would take it
        newer = entry_with_language(key, "an entry of a form the v2 release cannot store")
        too_new = (
            await new.call(
                session,
                "POST",
                "/v1/entries",
                {"record": newer},
                headers={"Authorization": f"Bearer {writer['api_key']}"},
            )
        )["record_hash"]

        async def crossed() -> bool:
            return await old.has(session, from_new) and await new.has(session, from_old)

        await until(crossed, "public records posted on each node reach the other")

        async def v2_sets_equal() -> bool:
            mine = await old.call(session, "GET", "/v1/sync/digest")
            theirs = await new.call(session, "GET", "/v1/sync/digest?v=2")
            return bool(mine["count"] == theirs["count"] and mine["sha256"] == theirs["sha256"])

        await until(v2_sets_equal, "the v2 node holds exactly the v3 node's v2-compatible records")
        # the v3 node speaks v2 to the v2 node (whose first answer was 422 unsupported_sync_version)
        assert (await new.peer_of(session, old))["sync_version"] == 2
        # reconciliation rounds both ways do not bring the v3-only record to the v2 node, nor count it invalid
        seen = (await old.peer_of(session, new))["reconciliations"]

        async def reconciled_twice_more() -> bool:
            return bool((await old.peer_of(session, new))["reconciliations"] >= seen + 2)

        await until(reconciled_twice_more, "the v2 node reconciled twice more with the v3 node")
        assert not await old.has(session, too_new)
        assert not await old.has(session, by_new_key_hash)
        counters = (await old.peer_of(session, new))["counters"]
        assert (counters["invalid"], counters["invalid_reasons"]) == (0, {}), counters
        assert "sync_version" not in await old.peer_of(session, new)  # still the old code answering
        full = await new.call(session, "GET", "/v1/sync/digest")
        # the v3-only records: the language entry, the key event, its vouch pages and the entry by the new key
        assert full["count"] >= (await old.call(session, "GET", "/v1/sync/digest"))["count"] + 3

        # the v2 node's data folder, served by this release on the same address
        old.stop()
        upgraded = Proc("upgraded", old.data, new_bbs, REPO, new_env, port=old.port, token=old.token)
        info = await upgraded.start(session)
        assert (info["node_id"], info["sync_versions"]) == (old.node_id, [2, 3])

        async def caught_up() -> bool:
            if not (await upgraded.has(session, too_new) and await upgraded.has(session, by_new_key_hash)):
                return False
            mine = await upgraded.call(session, "GET", "/v1/sync/digest")
            theirs = await new.call(session, "GET", "/v1/sync/digest")
            return bool(mine == {**theirs, "node_id": upgraded.node_id})

        await until(caught_up, "the upgraded node holds every record of the v3 node, digests equal")
        peer = await upgraded.peer_of(session, new)
        assert peer["sync_version"] == 3 and peer["reconciliations"] >= 1
        assert (peer["counters"]["invalid"], peer["counters"]["too_new"]) == (0, 0), peer["counters"]
        assert "reconciling before pulling" in upgraded.log_text()
    except BaseException:
        for p in (old, new):
            print(f"---- {p.name} log ----\n{p.log_text()}")
        raise
    finally:
        for p in (old, new):
            p.stop()
        if "upgraded" in locals():
            upgraded.stop()
