"""Installing and running peer systems for the side-by-side benchmarks: each in its own folder, on loopback.

Peers live in `$BBS_BENCH_PEERS_DIR` (default `~/.cache/agent-bbs-bench/peers`): PyPI packages in their own
virtualenv, npm packages in their own `node_modules`, so a second run does not reinstall them and nothing
touches the project's virtualenv.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

INSTALL_TIMEOUT_S = 900


class PeerUnavailable(RuntimeError):
    """A peer system could not be installed or run here; the message says why."""


def peers_dir() -> Path:
    return Path(os.environ.get("BBS_BENCH_PEERS_DIR", Path.home() / ".cache" / "agent-bbs-bench" / "peers"))


def pip_peer(name: str, package: str) -> tuple[Path, str]:
    """A virtualenv holding `package` (created and installed on first use); returns (python, version)."""
    venv = peers_dir() / name
    python = venv / "bin" / "python"
    if not python.exists():
        venv.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    version = _pip_version(python, package)
    if version is None:
        try:
            proc = subprocess.run(
                [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", package],
                capture_output=True,
                text=True,
                timeout=INSTALL_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            raise PeerUnavailable(f"`pip install {package}` did not finish in {INSTALL_TIMEOUT_S}s") from None
        errors = [line for line in proc.stderr.splitlines() if line.strip() and not line.startswith("WARNING")]
        if proc.returncode != 0:
            raise PeerUnavailable(f"`pip install {package}` failed: {(errors or ['no message'])[-1][:200]}")
        version = _pip_version(python, package)
        if version is None:
            raise PeerUnavailable(f"`pip install {package}` succeeded but the package is not importable")
    return python, version


def _pip_version(python: Path, package: str) -> str | None:
    proc = subprocess.run([str(python), "-m", "pip", "show", package], capture_output=True, text=True)
    for line in proc.stdout.splitlines():
        if line.startswith("Version:"):
            return line.split(":", 1)[1].strip()
    return None


def wait_for_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise PeerUnavailable(f"the server exited with status {proc.returncode} before listening")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise PeerUnavailable(f"the server did not listen on port {port} within {timeout:.0f}s")


def npm_peer(name: str, package: str) -> tuple[Path, str]:
    """A folder with `package` installed by `npm install` (on first use); returns (node_modules, version)."""
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        raise PeerUnavailable(f"`npm install {package}` needs node and npm on PATH; they are not installed here")
    folder = peers_dir() / name
    modules = folder / "node_modules"
    manifest = modules / package / "package.json"
    if not manifest.exists():
        folder.mkdir(parents=True, exist_ok=True)
        try:
            proc = subprocess.run(
                [npm, "install", "--no-audit", "--no-fund", "--prefix", str(folder), package],
                capture_output=True,
                text=True,
                timeout=INSTALL_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            raise PeerUnavailable(f"`npm install {package}` did not finish in {INSTALL_TIMEOUT_S}s") from None
        if proc.returncode != 0 or not manifest.exists():
            errors = [line for line in proc.stderr.splitlines() if "ERR" in line] or proc.stderr.splitlines()
            raise PeerUnavailable(f"`npm install {package}` failed: {(errors or ['no message'])[-1][:200]}")
    version = json.loads(manifest.read_text(encoding="utf-8"))["version"]
    return modules, str(version)


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Terminate a peer server we started (SIGTERM, then SIGKILL after 15 s)."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
