"""Operator commands of `bbs`: backup, restore, restore-leftovers, litestream-config, doctor, migrate-store,
processes.

Registered by node.cli.build_parser."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

import msgspec


def _data(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data",
        type=Path,
        default=Path(os.environ.get("BBS_DATA", "bbs-data")),
        help="data folder (default: $BBS_DATA or ./bbs-data)",
    )


def _print_json(value: Any) -> None:
    print(msgspec.json.encode(value).decode())


def _file_target(flag: str, path: Path) -> None:
    """Refuse a folder where a command writes a file (before any work is done)."""
    from node.ops.datadir import CommandError

    if path.is_dir():
        raise CommandError(f"{flag} {path} is a folder; give a file name")


def cmd_backup(args: argparse.Namespace) -> int:
    from node.ops.backup import backup
    from node.ops.datadir import require_node

    _file_target("--out", args.out)
    require_node(args.data)
    manifest = backup(args.data, args.out)
    _print_json({"out": str(args.out), **msgspec.structs.asdict(manifest)})
    return 0


def cmd_restore(args: argparse.Namespace) -> int:
    import tarfile

    from node.errors import InvalidInput
    from node.ops.backup import check_target, restore, restore_litestream
    from node.ops.datadir import CommandError
    from node.ops.progress import Reporter

    if args.data.exists() and not args.data.is_dir():
        raise CommandError(f"{args.data} is a file, not a data folder")
    if args.by_hand:
        from node.ops.processes import mark_restored

        given = [
            flag for flag, value in (("--store", args.store), ("--force", args.force), ("--key", args.key)) if value
        ]
        if given:
            raise CommandError(f"--by-hand marks the database the data folder names; {', '.join(given)} does not apply")
        mark_restored(args.data)
        _print_json({"data": str(args.data), "marked": "restored"})
        return 0
    if args.from_file is not None and args.from_file.is_file() and not tarfile.is_tarfile(args.from_file):
        raise InvalidInput(f"{args.from_file} is not a bbs backup (not a tar file)", code="backup_corrupt")
    check_target(args.data, force=args.force)  # refused before a long unpack, not after
    with Reporter() as progress:  # bars on a terminal, plain lines on stderr otherwise
        if args.from_file is not None:
            result = restore(args.from_file, args.data, store_url=args.store, force=args.force, progress=progress)
        else:
            key = args.key if args.key is not None else args.data / "node.key"
            result = restore_litestream(args.litestream_config, args.data, key, force=args.force, progress=progress)
    _print_json(result)
    return 0


def cmd_litestream_config(args: argparse.Namespace) -> int:
    from node.ops.backup import litestream_config
    from node.ops.datadir import require_node

    if args.out is not None:
        _file_target("--out", args.out)
    require_node(args.data)
    text = litestream_config(args.data, args.replica, sync_interval=args.sync_interval)
    if args.out is None:
        print(text, end="")
    else:
        args.out.write_text(text, "utf-8")
    return 0


def cmd_restore_leftovers(args: argparse.Namespace) -> int:
    from node.ops.backup import leftovers, remove_leftovers

    if not args.remove:
        found = leftovers(args.data)
        if args.json:
            _print_json(found)
        for left in [] if args.json else found:
            keep = "  (kept by --remove; --all removes it too)" if left.keep else ""
            print(f"{left.kind:8}  {left.path}  {left.bytes} bytes{keep}")
        return 0
    removed = remove_leftovers(args.data, everything=args.all)
    if args.json:
        _print_json(removed)
    for left in [] if args.json else removed:
        print(f"removed {left.kind} {left.path} ({left.bytes} bytes)")
    return 0


def cmd_processes(args: argparse.Namespace) -> int:
    from node.ops.processes import forget, registered
    from wire.time import format_ms

    if args.forget is not None:
        forget(args.data, args.forget)
        if args.json:
            _print_json({"forgot": args.forget})
        else:
            print(f"forgot process {args.forget}: no hold of the node's lease fence waits for it any more")
        return 0
    found = registered(args.data)
    if args.json:
        _print_json(found)
        return 0
    if found.history_changed:
        print("the database's history changed since the fence's last check: every process checks in at its next check")
    for p in found.processes:
        state = ("checked" if p.checked else "not checked") if p.vouched else "waiting for a vouch"
        mine = "  (this folder)" if p.this_folder else ""
        silent = "  silent: stopped or retired" if p.silent else ""
        print(
            f"{p.process}  {state:19}  registered {format_ms(p.registered_ms)}"
            f"  last check-in {format_ms(p.checked_in_ms)}{silent}{mine}"
        )
    for hold in found.holds:
        print(f"hold {hold.hold_id}  until {format_ms(hold.until_ms)}")
    if not found.processes and not found.holds:
        print("no process registered yet (a serving process registers within 5 s of its start)")
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from node.features import LOG
    from node.ops import doctor

    checks = doctor.diagnose(args.data, LOG, scratch=args.scratch, peer_timeout=args.peer_timeout)
    if args.json:
        _print_json(checks)
    else:
        for check in checks:
            print(f"{check.status:4}  {check.name}: {check.detail}")
    return doctor.exit_status(checks)


def cmd_migrate_store(args: argparse.Namespace) -> int:
    from node.features import LOG

    if args.to == "sqlite":
        return _migrate_back(args)
    from node.ops.migrate_store import migrate

    moved = migrate(args.from_data, args.to, LOG)
    if args.json:
        _print_json(moved)
        return 0
    print(
        f"moved node {moved.node_id} to PostgreSQL: {moved.tables} tables, {moved.rows} rows, {moved.records} records;"
        f" row counts, {moved.digests_checked} sync digests and the projections (copied and rebuilt) checked"
    )
    print(f"{args.from_data} now names its database in store.url; 'bbs serve --data {args.from_data}' serves it")
    print(f"the SQLite database is kept, unused, at {moved.kept_aside}")
    return 0


def _migrate_back(args: argparse.Namespace) -> int:
    from node.features import LOG
    from node.ops.migrate_back import migrate_back

    moved = migrate_back(args.from_data, LOG)
    if args.json:
        _print_json(moved)
        return 0
    if moved.finished:
        print(f"finished moving node {moved.node_id} to SQLite (an earlier run had copied and checked it)")
    else:
        print(
            f"moved node {moved.node_id} to SQLite: {moved.tables} tables, {moved.rows} rows, {moved.records} records;"
            f" row counts, {moved.digests_checked} sync digests and the projections (copied and rebuilt) checked"
        )
    print(f"{args.from_data} now keeps its database in bbs.db; 'bbs serve --data {args.from_data}' serves it")
    print(
        f"store.url is kept, unused, at {moved.kept_aside}; the PostgreSQL database is marked as moved (no process"
        " serves it): drop it once satisfied"
    )
    return 0


def add_commands(sub: Any) -> None:
    """Register the operator subcommands on build_parser's subparsers."""
    p = sub.add_parser(
        "backup", help="write a consistent backup of a data folder (safe while the node serves; pg_dump on PostgreSQL)"
    )
    _data(p)
    p.add_argument("--out", type=Path, required=True, help="backup file to write (a tar; keep it secret)")
    p.set_defaults(func=cmd_backup)

    p = sub.add_parser("restore", help="bring a data folder back from a backup; the store gets a new epoch")
    _data(p)
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--from", dest="from_file", type=Path, help="a file written by bbs backup")
    source.add_argument("--litestream-config", type=Path, help="restore bbs.db from this Litestream replica config")
    source.add_argument(
        "--by-hand",
        action="store_true",
        help="the PostgreSQL database the folder names was brought back by hand (pg_restore into the same cluster, a"
        " filesystem snapshot): mark it, so the node renews its store epoch and holds lease grants until every process"
        " has checked in",
    )
    p.add_argument("--key", type=Path, help="with --litestream-config: the node.key copy (default: DATA/node.key)")
    p.add_argument(
        "--store",
        help="a backup of a node on PostgreSQL: the database to load it into, a postgresql:// URL holding no node"
        " (default: the one the data folder names)",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="replace a non-empty data folder (moved aside, not deleted) and a --store database holding a node"
        " (its contents dropped)",
    )
    p.set_defaults(func=cmd_restore)

    p = sub.add_parser("restore-leftovers", help="list (or --remove) the folders restores left beside the data folder")
    _data(p)
    p.add_argument(
        "--remove", action="store_true", help="delete them: every unpacked copy, every replaced folder but the newest"
    )
    p.add_argument("--all", action="store_true", help="with --remove: the newest replaced folder too")
    p.add_argument("--json", action="store_true", help="print them as JSON")
    p.set_defaults(func=cmd_restore_leftovers)

    p = sub.add_parser("litestream-config", help="print a litestream.yml replicating this node's database")
    _data(p)
    p.add_argument("--replica", required=True, help="a folder, or a replica URL such as s3://bucket/path")
    p.add_argument("--sync-interval", default="1s", help="how often Litestream ships changes (default 1s)")
    p.add_argument("--out", type=Path, help="write to this file instead of stdout")
    p.set_defaults(func=cmd_litestream_config)

    p = sub.add_parser(
        "processes",
        help="the processes of a node on PostgreSQL, as its lease fence registered them, and the holds on its grants",
    )
    _data(p)
    p.add_argument("--forget", metavar="ID", help="remove a process retired for good: no hold waits for it again")
    p.add_argument("--json", action="store_true", help="print them as JSON")
    p.set_defaults(func=cmd_processes)

    p = sub.add_parser(
        "doctor",
        help="check a data folder: integrity, search index, projections, key file, peers (SQLite or PostgreSQL)",
    )
    _data(p)
    p.add_argument("--json", action="store_true", help="print the findings as JSON")
    p.add_argument("--scratch", type=Path, help="folder for the temporary copy of the database (default: $TMPDIR)")
    p.add_argument("--peer-timeout", type=float, default=5.0, help="seconds to wait for each peer")
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser(
        "migrate-store",
        help="move a stopped node's database from its bbs.db into an empty PostgreSQL database, or back (--to sqlite),"
        " checked, then switch",
        description="Copy the node's SQLite database (DATA/bbs.db) into an empty PostgreSQL database (migrated to"
        " this software's schema first), in one transaction; check the row count of every table, the sync digests"
        " and a rebuild of the projections against the copy; then point the folder at it (DATA/store.url) and keep"
        " bbs.db aside as DATA/bbs.db.before-postgresql-<time>. On any difference nothing is switched. Refused while"
        " the node serves, for a folder already on PostgreSQL, a database that is not empty, or a bbs.db at another"
        " schema version (start the node once first). With --to sqlite, the reverse: the PostgreSQL database"
        " copied into a new DATA/bbs.db, checked the same way, the database marked as moved and DATA/store.url kept"
        " aside; refused while any other client is connected to the database.",
    )
    p.add_argument(
        "--from",
        dest="from_data",
        type=Path,
        default=Path(os.environ.get("BBS_DATA", "bbs-data")),
        help="the data folder of the node to move (default: $BBS_DATA or ./bbs-data)",
    )
    p.add_argument(
        "--to",
        required=True,
        help="the empty PostgreSQL database, a postgresql:// URL; or 'sqlite': move the node from the PostgreSQL"
        " database the folder names back into DATA/bbs.db (every process of the node stopped)",
    )
    p.add_argument("--json", action="store_true", help="print what was moved as JSON")
    p.set_defaults(func=cmd_migrate_store)
