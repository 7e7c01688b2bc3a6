"""The runtime's hard boundary: it reads and writes records and nothing else.

Two proofs: (1) the runtime's modules, and every project module they import, import nothing that
reaches the network, the file system or other processes; (2) every operation runs to completion
while outbound connections, subprocesses and file writes are made to fail.
"""

from __future__ import annotations

import ast
import asyncio
import builtins
import io
import os
import socket
import subprocess
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from node.default_mode.service import ADMIN
from node.service import Node
from tests.conftest import AgentCreds
from wire.api import PostEntry
from wire.default_mode import (
    CandidateQuery,
    ConsolidateIn,
    CriticIn,
    IncubateIn,
    PromoteIn,
    ProposedCandidate,
    ReflectIn,
    ReviewIn,
    SimulateFutureIn,
    StakeholderIn,
)

ROOT = Path(__file__).resolve().parents[3]
FORBIDDEN = {
    "socket", "ssl", "subprocess", "os", "pathlib", "shutil", "tempfile", "io", "urllib", "http", "aiohttp",
    "requests", "httpx", "smtplib", "ftplib", "multiprocessing", "ctypes", "importlib", "webbrowser", "select",
    "selectors", "signal", "asyncio.subprocess",
}  # fmt: skip
EDGE = {"node.default_mode.routes"}  # the HTTP edge parses requests; it is not the runtime


def _module_file(name: str) -> Path | None:
    path = ROOT.joinpath(*name.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.exists():
            return candidate
    return None


def _imports(path: Path, package: str) -> set[str]:
    """The modules `path` imports when it runs (an `if TYPE_CHECKING:` block's imports never run)."""
    names: set[str] = set()
    tree = ast.parse(path.read_text())
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
        for stmt in node.body
        for inner in ast.walk(stmt)
    }
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            base = node.module
            if node.level:
                base = ".".join([*package.split(".")[: len(package.split(".")) - node.level + 1], node.module])
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names if _module_file(f"{base}.{alias.name}"))
    return names


def test_runtime_modules_import_nothing_that_does_io() -> None:
    pkg = ROOT / "node" / "default_mode"
    todo = [f"node.default_mode.{p.stem}" for p in sorted(pkg.glob("*.py")) if p.stem != "__init__"]
    todo = [m for m in todo if m not in EDGE]
    seen: set[str] = set()
    offenders: list[tuple[str, str]] = []
    while todo:
        mod = todo.pop()
        if mod in seen:
            continue
        seen.add(mod)
        path = _module_file(mod)
        assert path is not None, mod
        for name in _imports(path, mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]):
            top = name.split(".")[0]
            if name in FORBIDDEN or top in FORBIDDEN:
                offenders.append((mod, name))
            elif top in ("node", "identity") and _module_file(name):
                todo.append(name)
    assert "node.default_mode.service" in seen and "node.entries.queries" in seen
    assert offenders == []


class Trap:
    """Make outbound connections, subprocesses and file writes fail, and remember every attempt."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.attempts: list[str] = []
        self.mp = monkeypatch

    def _fail(self, what: str) -> Callable[..., Any]:
        def refuse(*args: Any, **kwargs: Any) -> Any:
            self.attempts.append(what)
            raise PermissionError(f"default-mode boundary: {what} attempted")

        return refuse

    def _afail(self, what: str) -> Callable[..., Awaitable[Any]]:
        async def refuse(*args: Any, **kwargs: Any) -> Any:
            self.attempts.append(what)
            raise PermissionError(f"default-mode boundary: {what} attempted")

        return refuse

    def install(self) -> None:
        real_open = builtins.open
        real_os_open = os.open

        def guarded_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
            if any(ch in mode for ch in "wax+"):
                self.attempts.append(f"open({file!r}, {mode!r})")
                raise PermissionError("default-mode boundary: file write attempted")
            return real_open(file, mode, *args, **kwargs)

        def guarded_os_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
            if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC):
                self.attempts.append(f"os.open({path!r})")
                raise PermissionError("default-mode boundary: file write attempted")
            return real_os_open(path, flags, *args, **kwargs)

        mp = self.mp
        mp.setattr(builtins, "open", guarded_open)
        mp.setattr(io, "open", guarded_open)
        mp.setattr(os, "open", guarded_os_open)
        mp.setattr(socket, "create_connection", self._fail("socket.create_connection"))
        mp.setattr(socket.socket, "connect", self._fail("socket.connect"))
        mp.setattr(socket.socket, "connect_ex", self._fail("socket.connect_ex"))
        mp.setattr(socket.socket, "sendto", self._fail("socket.sendto"))
        mp.setattr(socket, "getaddrinfo", self._fail("socket.getaddrinfo"))
        mp.setattr(asyncio, "open_connection", self._afail("asyncio.open_connection"))
        mp.setattr(asyncio.BaseEventLoop, "create_connection", self._afail("loop.create_connection"))
        mp.setattr(asyncio.BaseEventLoop, "create_datagram_endpoint", self._afail("loop.create_datagram_endpoint"))
        mp.setattr(subprocess, "Popen", self._fail("subprocess.Popen"))
        mp.setattr(os, "system", self._fail("os.system"))
        mp.setattr(os, "popen", self._fail("os.popen"))
        mp.setattr(os, "posix_spawn", self._fail("os.posix_spawn"))
        mp.setattr(os, "execv", self._fail("os.execv"))


@pytest.fixture
def trap(monkeypatch: pytest.MonkeyPatch) -> Iterator[Trap]:
    yield Trap(monkeypatch)


async def test_every_operation_runs_with_network_files_and_processes_forbidden(
    node: Node, make_agent: Callable[[str], Awaitable[AgentCreds]], trap: Trap, tmp_path: Path
) -> None:
    alice = await make_agent("alice")
    evidence, _ = await node.entries.post(
        alice.agent_id, PostEntry(entry_type="finding", performative="inform", content="The nightly backup ran"), None
    )
    rt = node.default_mode
    trap.install()

    # the trap is live: each of these fails
    with pytest.raises(PermissionError):
        socket.create_connection(("127.0.0.1", 9))
    with pytest.raises(PermissionError):
        open(tmp_path / "x.txt", "w")  # noqa: SIM115
    with pytest.raises(PermissionError):
        subprocess.Popen(["true"])
    with pytest.raises(PermissionError):
        await asyncio.open_connection("127.0.0.1", 9)
    expected_attempts = len(trap.attempts)

    reflected, _ = await rt.reflect(
        alice.agent_id,
        ReflectIn(transcript="We decided to use the nightly backup\nRemember the privacy review next week",
                  evidence_refs=[evidence.record_hash]),
    )  # fmt: skip
    reviewed, _ = await rt.critic(
        alice.agent_id,
        CriticIn(candidates=[ProposedCandidate(kind="reflection", text="Backups finish before six",
                                               evidence_refs=[evidence.record_hash])]),
    )  # fmt: skip
    await rt.critic(alice.agent_id, CriticIn(candidate_ids=[c.id for c in reflected.candidates]))
    promoted = await rt.promote(alice.agent_id, reviewed.candidates[0].id, PromoteIn(), idempotency_key="p-1")
    again = await rt.promote(alice.agent_id, reviewed.candidates[0].id, PromoteIn(), idempotency_key="p-1")
    consolidated, _ = await rt.consolidate(alice.agent_id, ConsolidateIn(), None)
    future, _ = await rt.simulate_future(alice.agent_id, SimulateFutureIn(goal="a second node"))
    stake, _ = await rt.stakeholder_simulation(alice.agent_id, StakeholderIn(stakeholder="Bob", proposal="new disk"))
    incubated, _ = await rt.incubate(alice.agent_id, IncubateIn(problem="slow backups"), "incubate-1")
    decided = await rt.review(ADMIN, incubated.candidate.id, ReviewIn(decision="approve"))
    by_admin = await rt.promote_as_admin(incubated.candidate.id, PromoteIn(author=alice.agent_id))
    dropped = await rt.review(ADMIN, future.candidate.id, ReviewIn(decision="reject"))
    listed = await rt.candidates(CandidateQuery(), viewer=None)

    assert trap.attempts[expected_attempts:] == []
    assert len(reflected.candidates) == 2 and promoted.created and not again.created
    assert again.entry.record_hash == promoted.entry.record_hash
    assert consolidated.kind == "consolidation" and future.candidate.synthetic and stake.candidate.synthetic
    assert incubated.candidate.status == "needs_review" and decided.status == "approved"
    assert by_admin.created and by_admin.candidate.promote_requested_by == ADMIN and dropped.status == "rejected"
    assert len(listed.candidates) == 7
