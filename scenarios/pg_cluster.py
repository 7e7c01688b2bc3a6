"""A throwaway PostgreSQL cluster for the tests and the scenarios: initdb and pg_ctl into a temporary folder, a
unix socket only (scenarios/ holds it so that both can use it: scenarios never import tests).

One cluster per test process (each pytest-xdist worker starts its own, the first time a test asks for one) and
one database per test, cloned from a template that holds the schema (CREATE DATABASE ... TEMPLATE copies its
files: tens of milliseconds in /dev/shm, where the tests' clusters go: `start`). PostgreSQL refuses to run as root,
so as root (CI and the development machines) initdb and the server run as the `postgres` user that Debian's package
creates (`runuser -u postgres --`). The server runs with fsync off: a test cluster is thrown away, never recovered.
docs/operations.md, "PostgreSQL (in progress)".
"""

from __future__ import annotations

import glob
import itertools
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

PORT = 5432  # the socket's name (.s.PGSQL.5432) inside the cluster's own folder: no TCP port is opened
SUPERUSER = "postgres"
# small: one cluster per test process, several processes on a CI machine; wal_recycle off as a node's operator sets
# it (a recycled WAL segment keeps a redacted body's bytes: docs/operations.md, docs/decisions.md record 78)
TEST_SETTINGS = (
    "-c fsync=off -c full_page_writes=off -c shared_buffers=32MB -c max_connections=100 -c wal_recycle=off"
    " -c max_wal_size=128MB -c min_wal_size=32MB"  # a database copy writes the template to the WAL: keep it small
)


def find_bindir() -> Path | None:
    """The folder of PostgreSQL's server programs (initdb, pg_ctl, postgres), or None when it is not installed:
    `pg_config --bindir` when that holds initdb, else the newest /usr/lib/postgresql/*/bin (Debian's layout)."""
    candidates: list[Path] = []
    if shutil.which("pg_config"):
        found = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, check=False)
        if found.returncode == 0 and found.stdout.strip():
            candidates.append(Path(found.stdout.strip()))
    versions = glob.glob("/usr/lib/postgresql/*/bin")
    candidates += sorted(
        (Path(p) for p in versions), key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0
    )[::-1]
    for bindir in candidates:
        if (bindir / "initdb").is_file() and (bindir / "pg_ctl").is_file() and (bindir / "postgres").is_file():
            return bindir
    return None


def _as_server_user() -> list[str]:
    """The prefix that runs a server program as a user PostgreSQL accepts: `postgres` when we are root."""
    if os.geteuid() != 0:
        return []
    if shutil.which("runuser") is None:
        raise RuntimeError("running as root needs runuser (util-linux) to start PostgreSQL as the postgres user")
    return ["runuser", "-u", SUPERUSER, "--"]


@dataclass
class Cluster:
    """A running throwaway cluster: its folder (data and socket), and a counter for database names."""

    bindir: Path
    folder: Path
    options: str = ""  # the `postgres` options it was started with (`pg_ctl -o`): a restart uses them again
    _names: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    @property
    def data(self) -> Path:
        """The cluster's data directory."""
        return self.folder / "data"

    def url(self, dbname: str = "postgres") -> str:
        """A libpq connection string for database `dbname` over the cluster's unix socket."""
        return f"host={self.folder} port={PORT} user={SUPERUSER} dbname={dbname}"

    def store_url(self, dbname: str) -> str:
        """The `postgresql://` URL `--store` takes for database `dbname` (over the cluster's unix socket)."""
        return f"postgresql://{SUPERUSER}@/{dbname}?host={self.folder}&port={PORT}"

    def admin(self, sql: str) -> None:
        """Run one statement outside a transaction (CREATE / DROP DATABASE) on the maintenance database."""
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(sql)

    def create_database(self, template: str | None = None) -> str:
        """A new empty database (or a copy of `template`); its name."""
        name = f"t{os.getpid()}_{next(self._names)}"
        self.admin(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))
        return name

    def drop_database(self, name: str) -> None:
        """Drop a database, ending any connection a test left open to it."""
        self.admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def restart(self) -> None:
        """Stop the server at once (`-m immediate`: every session ends as in a crash, the server recovers from its
        WAL at the start) and start it again on the same data folder with the same options; back when it accepts
        connections. Raises RuntimeError when either step fails."""
        run_as = _as_server_user()
        pg_ctl = str(self.bindir / "pg_ctl")
        for command in (
            [pg_ctl, "-D", str(self.data), "-m", "immediate", "stop"],
            [pg_ctl, "-D", str(self.data), "-l", str(self.folder / "server.log"), "-o", self.options, "-w", "start"],
        ):
            done = subprocess.run([*run_as, *command], capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise RuntimeError(f"pg_ctl {command[-1]} failed ({done.returncode}): {done.stderr}{done.stdout}")

    def run(self, program: str, *args: str) -> None:
        """Run one of the cluster's server programs (`pg_ctl`, `pg_basebackup`) as the user the server runs as;
        RuntimeError when it fails."""
        done = subprocess.run(
            [*_as_server_user(), str(self.bindir / program), *args], capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"{program} failed ({done.returncode}): {done.stderr}{done.stdout}")

    def standby_copy(self) -> Cluster:
        """A `pg_basebackup` of this cluster into a new folder, started as a standby with no primary to stream from:
        a replica whose replication stopped at the copy's end (what an asynchronous replica holds when its primary
        dies). `promote` makes it the primary (a failover: a new timeline). The caller stops it."""
        folder = Path(tempfile.mkdtemp(prefix="bbs-pg-"))  # short: a socket path may not pass 107 bytes
        if _as_server_user():
            shutil.chown(folder, SUPERUSER, SUPERUSER)
        replica = Cluster(self.bindir, folder, f"-k {folder} -p {PORT} -c listen_addresses='' {TEST_SETTINGS}")
        try:
            self.run(
                "pg_basebackup",
                *("-D", str(replica.data), "-h", str(self.folder), "-p", str(PORT), "-U", SUPERUSER),
                *("-X", "stream", "--checkpoint=fast", "--no-sync"),
            )
            (replica.data / "standby.signal").touch()
            if _as_server_user():
                shutil.chown(replica.data / "standby.signal", SUPERUSER, SUPERUSER)
            replica.run(
                "pg_ctl",
                "-D",
                str(replica.data),
                "-l",
                str(folder / "server.log"),
                "-o",
                replica.options,
                "-w",
                "start",
            )
        except BaseException:
            replica.stop()  # nothing left running or on disk when the copy failed
            raise
        return replica

    def promote(self) -> None:
        """Make a standby the primary (`pg_ctl promote`): it takes a new timeline and accepts writes."""
        self.run("pg_ctl", "-D", str(self.data), "-w", "promote")

    def stop(self) -> None:
        """Stop the server at once (nothing of a test cluster needs to survive) and remove its folder."""
        subprocess.run(
            [*_as_server_user(), str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop"],
            capture_output=True,
            check=False,
        )
        shutil.rmtree(self.folder, ignore_errors=True)


# the room /dev/shm must have for a test cluster to go there (`start(in_memory=True)`)
IN_MEMORY_ROOM = 2 << 30


def memory_folder() -> str | None:
    """/dev/shm when it is there, writable, with IN_MEMORY_ROOM free, else None (the temporary folder)."""
    try:
        found = os.statvfs("/dev/shm")
    except OSError:
        return None
    room = found.f_bavail * found.f_frsize >= IN_MEMORY_ROOM
    writable = not found.f_flag & os.ST_RDONLY and os.access("/dev/shm", os.W_OK | os.X_OK)
    return "/dev/shm" if room and writable else None


def start(bindir: Path, settings: str = TEST_SETTINGS, *, in_memory: bool = False) -> Cluster:
    """initdb a new cluster in a fresh temporary folder and start it, listening on a unix socket there only, with
    `settings` (`-c name=value` options of `postgres`; TEST_SETTINGS: a small cluster nothing of which must survive).

    `in_memory` puts the folder in /dev/shm when it has room (`memory_folder`): the tests' clusters, which copy and
    drop a database of about 700 files per test. On ext4 each copy then spent 0.6 to 0.8 s of CPU in the kernel,
    whose inode allocator skips the inodes of the databases dropped just before (`recently_deleted`); never a
    benchmark's cluster, whose fsync must reach a disk."""
    where = memory_folder() if in_memory else None
    folder = Path(tempfile.mkdtemp(prefix="bbs-pg-", dir=where))  # short: a socket path may not pass 107 bytes
    run_as = _as_server_user()
    if run_as:
        shutil.chown(folder, SUPERUSER, SUPERUSER)
    options = f"-k {folder} -p {PORT} -c listen_addresses='' {settings}"
    cluster = Cluster(bindir, folder, options)
    commands = [
        [
            str(bindir / "initdb"),
            "-D",
            str(cluster.data),
            "-U",
            SUPERUSER,
            "--auth=trust",
            "--no-sync",
            "--no-locale",
            "-E",
            "UTF8",
        ],
        [
            str(bindir / "pg_ctl"),
            "-D",
            str(cluster.data),
            "-l",
            str(folder / "server.log"),
            "-o",
            options,
            "-w",
            "start",
        ],
    ]
    for command in commands:
        done = subprocess.run([*run_as, *command], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            log = folder / "server.log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            cluster.stop()
            raise RuntimeError(f"{done.args[len(run_as)]} failed ({done.returncode}): {done.stderr}{done.stdout}{tail}")
    return cluster
