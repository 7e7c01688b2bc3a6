"""PostgreSQL's own programs for the operator's tools (docs/decisions.md record 77): `pg_dump` writes a node's
database into a backup, `pg_restore` and `psql` bring one back in one transaction.

The programs are found where the server's are (`pg_config --bindir`, else the newest /usr/lib/postgresql/*/bin,
Debian's layout), else on PATH: the newest first, since a pg_dump older than the server refuses to dump it. The
node's URL is given to them without its password, which goes in `PGPASSWORD` (a command line is visible to every
local user); an error names the program and what it said, never the URL.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
from pathlib import Path

from node.errors import BBSError, Conflict, InvalidInput, NotFound
from node.store import conn as neutral

CLIENT_PACKAGE = "PostgreSQL's client programs (Debian: apt-get install postgresql-client)"


def _bindirs() -> list[Path]:
    found: list[Path] = []
    if shutil.which("pg_config"):
        done = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, check=False)
        if done.returncode == 0 and done.stdout.strip():
            found.append(Path(done.stdout.strip()))
    versions = (Path(p) for p in glob.glob("/usr/lib/postgresql/*/bin"))
    found += sorted(versions, key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0, reverse=True)
    return found


def program(name: str) -> str:
    """The path of PostgreSQL program `name` (pg_dump, pg_restore, psql); NotFound when it is not installed."""
    for bindir in _bindirs():
        if (bindir / name).is_file():
            return str(bindir / name)
    on_path = shutil.which(name)
    if on_path is None:
        raise NotFound(f"{name} is not installed: install {CLIENT_PACKAGE}", code="pg_tool_missing")
    return on_path


def _target(url: str) -> tuple[str, dict[str, str]]:
    """`url` as a connection string without its password, and the environment that carries the password."""
    from psycopg import conninfo  # here: `bbs backup` of a node on SQLite imports no psycopg (node/store/db.py)

    params = conninfo.conninfo_to_dict(url)
    password = params.pop("password", None)
    env = dict(os.environ)
    if password is not None:
        env["PGPASSWORD"] = str(password)
    return conninfo.make_conninfo(**{k: str(v) for k, v in params.items() if v is not None}), env


def _failed(name: str, stderr: str) -> BBSError:
    return BBSError(f"{name} failed: {stderr.strip()[-500:]}", code="pg_tool_failed")


def dump(url: str, dest: Path, *, snapshot: str | None = None, exclude_data: tuple[str, ...] = ()) -> None:
    """`pg_dump --format=custom` of the database at `url` into `dest` (mode 600), as of `snapshot` (an exported
    snapshot: the dump and the caller's reads see one instant) and without the rows of the `exclude_data` tables.
    Uncompressed, as a SQLite backup's copy is: what a backup holds can be searched for (a redacted body must not
    be found in a later one), and compressing the whole tar is the operator's choice."""
    dsn, env = _target(url)
    command = [program("pg_dump"), "--format=custom", "--compress=0", "--no-owner", "--no-privileges", f"--file={dest}"]
    if snapshot is not None:
        command.append(f"--snapshot={snapshot}")
    command += [f"--exclude-table-data={table}" for table in exclude_data]
    old_umask = os.umask(0o077)
    try:
        done = subprocess.run([*command, f"--dbname={dsn}"], capture_output=True, text=True, env=env, check=False)
    finally:
        os.umask(old_umask)
    if done.returncode != 0:
        raise _failed("pg_dump", done.stderr)


def check_dump(path: Path) -> None:
    """Refuse a file pg_restore cannot read as a custom-format dump (`backup_corrupt`), before any change."""
    done = subprocess.run([program("pg_restore"), "--list", str(path)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise InvalidInput(f"the database dump is unreadable: {done.stderr.strip()[-300:]}", code="backup_corrupt")


def table_rows(path: Path, table: str) -> list[list[str]]:
    """The rows of `table` in a custom-format dump, each a list of text fields (COPY's text format), read without
    restoring it: what the dump holds can be checked before a database is touched."""
    done = subprocess.run(
        [program("pg_restore"), "--data-only", f"--table={table}", "--file=-", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise InvalidInput(f"the database dump is unreadable: {done.stderr.strip()[-300:]}", code="backup_corrupt")
    rows: list[list[str]] = []
    copying = False
    for line in done.stdout.splitlines():
        if line.startswith("COPY "):
            copying = True
        elif copying and line == "\\.":
            copying = False
        elif copying:
            rows.append([_copy_field(field) for field in line.split("\t")])
    return rows


_ESCAPES = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\"}


def _copy_field(field: str) -> str:
    """One field of COPY's text format, its backslash escapes undone (octal and hex escapes do not occur in the
    node_meta values read here; they are left as they are)."""
    out: list[str] = []
    chars = iter(field)
    for char in chars:
        if char == "\\":
            following = next(chars, "")
            out.append(_ESCAPES.get(following, "\\" + following))
        else:
            out.append(char)
    return "".join(out)


# How long the restore's psql waits for a lock another connection holds (a process of the node still serving, a
# session left open in a transaction) before it gives up: `database_in_use`, rather than waiting without end.
RESTORE_LOCK_TIMEOUT_MS = 30_000
# psql's report (VERBOSITY verbose) of an error whose SQLSTATE says another connection is in the way: a lock waited
# for past the timeout, or a deadlock with a session using the tables the restore drops
_IN_USE = re.compile(rf"\b(?:ERROR|FATAL):\s+(?:{neutral.LOCK_NOT_AVAILABLE}|{neutral.DEADLOCK_DETECTED}):")


def restore(path: Path, url: str, before: str, *, lock_timeout_ms: int = RESTORE_LOCK_TIMEOUT_MS) -> None:
    """Load a custom-format dump into the database at `url` in ONE transaction, after the statements `before`
    (which empty it). pg_restore first writes the dump as SQL to a private file beside it (a dump it cannot read
    whole is refused before the database is touched); psql then runs `before` and that file with
    `--single-transaction`, stopping at the first error, so a failed restore leaves the database as it was. A lock
    it waits for more than `lock_timeout_ms` (another connection using a table it drops) fails it, 409
    `database_in_use`."""
    dsn, env = _target(url)
    env["PGOPTIONS"] = f"{env.get('PGOPTIONS', '')} -c lock_timeout={int(lock_timeout_ms)}".strip()
    script = path.with_name(path.name + ".sql")
    old_umask = os.umask(0o077)
    try:
        written = subprocess.run(
            [program("pg_restore"), "--no-owner", "--no-privileges", f"--file={script}", str(path)],
            capture_output=True,
            text=True,
            check=False,
        )
    finally:
        os.umask(old_umask)
    try:
        if written.returncode != 0:
            raise InvalidInput(
                f"the database dump is unreadable: {written.stderr.strip()[-300:]}", code="backup_corrupt"
            )
        loaded = subprocess.run(
            [
                program("psql"),
                "--no-psqlrc",
                "--quiet",
                "--single-transaction",
                "--set=ON_ERROR_STOP=1",
                "--set=VERBOSITY=verbose",  # errors carry their SQLSTATE, whatever language the server speaks
                f"--command={before}",
                f"--file={script}",
                f"--dbname={dsn}",
            ],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
    finally:
        script.unlink(missing_ok=True)
    if loaded.returncode != 0:
        if _IN_USE.search(loaded.stderr):
            raise Conflict(
                "another connection to the database holds a lock the restore needs (waited for past"
                f" {lock_timeout_ms} ms, or a deadlock with it; a process of the node still serving it?): stop every"
                " process of the node, then restore again;"
                " nothing was changed",
                code="database_in_use",
            )
        raise _failed("psql (the restore, rolled back)", loaded.stderr)
