"""The node: its key, its database, and the feature services built on them, once.

Each feature lives in a module named after what it holds, and `Node` hands out one instance of each:
`sealing` (signing and checking records), `agents`, `entries` (posting; retractions are entries), `links`,
`reads` (read and search), `feed` (entries in arrival order), `inbox` (subscriptions and notifications),
`bus` (messages), `workflows` (tasks and leases), `default_mode`, `trust` and `sync`. REST, MCP and the CLI
only parse and format; the features do the work. The features never import this module: it imports them.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Callable
from pathlib import Path

from identity import canonical, key_files, keys, schema
from node import __version__
from node.agents import recovery_file
from node.agents.challenges import Challenges, SharedChallenges
from node.agents.key_events import KeyEvents, kept_rotations
from node.agents.recovery import Recovery
from node.agents.service import Agents
from node.default_mode.service import DefaultMode
from node.entries.links import Links
from node.entries.posting import Entries
from node.entries.reads import Reads
from node.features import LOG
from node.federation.node_key import NodeKeys
from node.federation.store import NodeSyncStore, store_epoch
from node.feed.service import Feed
from node.inbox.service import MAX_SUBSCRIPTIONS, Inbox
from node.ops import history
from node.ops.datadir import DataDir
from node.redaction.service import Redactions
from node.search_index import indexer
from node.search_index.index import SearchIndex
from node.spaces import store as space_store
from node.spaces.service import Spaces
from node.store import authority
from node.store.conn import Conn
from node.store.db import Database, connect_store
from node.store.key_fence import KEY_FENCE_NAME, KeyFence
from node.store.leader import Leadership
from node.store.projections import Log
from node.store.sealing import Sealing
from node.store.side import SideConnection
from node.trust.service import Trust
from node.workflows.fence import FENCE_NAME
from node.workflows.messaging import Bus
from node.workflows.service import Workflows
from sync.messages import SYNC_VERSIONS
from wire.api import MAX_BATCH, MAX_HOPS, NodeInfo


class Node:
    """One node: its key, its database and the feature services on them."""

    def __init__(self, data_dir: Path, *, clock: Callable[[], float] = time.time, log: Log = LOG) -> None:
        self.data = DataDir(data_dir)
        self.clock = clock
        self.process_id = secrets.token_hex(8)  # this serving process, one of the node's (issue 41)
        self.key = key_files.load_key(self.data.key_path)
        self.db: Database = Database(self.data.store, log=log)  # `log`: the projectors and tables its writes go through
        self.sealing = Sealing(self.db, self.now_ms)
        self.sealing.key_fence = KeyFence(self.data.root / KEY_FENCE_NAME)  # keys rotated out here (a restore)
        self.node_keys: NodeKeys = NodeKeys(self.db, self.sealing, self.key, self.now_ms)  # its signing keys (open)
        self.agents = Agents(self.db, self.node_id, self.now_ms)
        self.entries = Entries(self.db, self.sealing, self.now_ms)
        self.links = Links(self.db, self.sealing, self.now_ms)
        self.reads = Reads(self.db)
        self.feed = Feed(self.db)
        # inbox, workflows, trust annotated: node/web/background.py's tasks read them back (mypy cannot infer them
        # across the TYPE_CHECKING cycle Node -> features -> background -> Node)
        self.inbox: Inbox = Inbox(self.db, self.now_ms)
        self.bus = Bus(self.db, self.sealing, self.now_ms)
        self.workflows: Workflows = Workflows(
            self.db, self.sealing, self.node_keys.signer, self.now_ms, self.data.root / FENCE_NAME
        )
        self.default_mode = DefaultMode(self.db, self.node_id, self.now_ms, self.entries, self.reads, space_store)
        self.trust: Trust = Trust(self.db, self.now_ms)
        self.sync = NodeSyncStore(self.db, self.node_id, self.now_ms, authority=self.sealing.authority)
        # key events over REST, rotations; revocations and recoveries of node-kept keys (node/agents/recovery.py)
        self.key_events = KeyEvents(self.db, self.sealing, self.now_ms, self.data.root / recovery_file.FILE_NAME)
        self.recovery = Recovery(self.key_events)
        self.spaces = Spaces(self.db, self.sealing, self.now_ms, self.node_id)  # spaces (docs/spaces.md)
        self.redactions = Redactions(self.db, self.sealing, self.now_ms)  # redactions and tombstones (issue 39)
        self.sync.on_redactions = self.redactions.wake
        # the store epoch looked at while serving (a database brought back under this process): node/ops/history.py
        self.epoch_watch: history.EpochWatch = history.EpochWatch(self.db, self.now_ms)
        self.epoch_watch.listeners.append(self.sync.epoch_is)
        # retention policy -> days of node-local rows kept (0 or absent: off; node/retention/job.py)
        self.retention_days: dict[str, int] = {}
        # this process's own connection outside the writer (PostgreSQL: what its processes share, record 86)
        self.side = None if self.db.pg_url is None else SideConnection(self.db.pg_url)
        # pending key-proof challenges, never the writer's: this process's memory, or the node's (PostgreSQL)
        self.challenges: Challenges | SharedChallenges = (
            Challenges() if self.side is None else SharedChallenges(self.side)
        )
        # several processes on one PostgreSQL database (record 90): what write decisions read from memory is checked
        # against the database in the first write transaction after another process committed
        self.db.clock.on_foreign_write.append(self._foreign_write_txn)
        self.sealing.keys_valid_for = lambda: (self.sealing.authority.changes, self.agents.tokens.epoch)
        self.search_index: SearchIndex | None = None  # opened with the node (node/search_index/)
        # whether this process runs the node's once-per-node work (node/store/leader.py; always, on SQLite)
        self.leadership = Leadership(self.db.pg_url, self.process_id)

    def _foreign_write_txn(self, conn: Conn) -> None:
        """Another process of the node committed since this one last wrote: load the authority cache again if the
        key events it holds changed, and then the node's signing keys (a node-key rotation is a key event). Runs on
        the writer thread, in the write transaction, under the writer lock (node/store/db.py)."""
        if not authority.revalidate_txn(self.sealing.authority, conn):
            return
        try:
            self.node_keys.reload_txn(conn)
            # rotations of keys this node keeps made through another process: fenced here too (record 92)
            node_key = self.node_keys.signer.keys[-1].did
            rotations = kept_rotations(conn, self.sealing.authority, self.node_id, node_key)
            self.sealing.key_fence.learn(rotations, store_epoch(conn), self.now_ms())
        except BaseException:
            self.sealing.authority.invalidate()  # not revalidated: the next write loads it, and learns, again
            raise

    @property
    def node_id(self) -> str:
        return self.key.did

    def now_ms(self) -> int:
        """This node's clock, in epoch milliseconds."""
        return int(self.clock() * 1000)

    def open(self, *, search_index: bool = True) -> None:
        """Open the database (its writer thread starts) and, unless told not to, the search index.

        An admin command (`bbs agent create` and the like) opens the node without the index: it searches
        nothing, and the index's writer lock belongs to the node serving the folder, if one does."""
        self.db.open()
        try:
            with contextlib.closing(connect_store(self.data.store)) as conn:  # one connection for the start's checks
                if self.db.pg_url is not None:  # before anything reads the store epoch (the index's stamp, the fences)
                    history.follow_at_start(conn, self.now_ms())
                self.node_keys.load(conn)  # the node's signing keys after a rotation, and the key fence's verdict
                if search_index and self.search_index is None:
                    self.search_index = indexer.open_index(self.data.root, conn)
                    self.reads.index = self.search_index
        except BaseException:
            self.db.close()
            raise

    def close(self) -> None:
        """Close the search index and the database, and stop the crypto threads."""
        if self.search_index is not None:
            self.reads.index = None
            self.search_index.close()
            self.search_index = None
        self.db.close()
        self.sealing.close()

    def info(self) -> NodeInfo:
        """This node's id, key, versions and limits (GET /v1/node)."""
        return NodeInfo(
            node_id=self.node_id,
            public_key=keys.b64u(keys.public_key_bytes(self.key.public_key)),
            software="agent-bbs",
            version=__version__,
            schema_version=self.db.schema_version,
            record_schema=canonical.SCHEMA_VERSION,
            sync_versions=list(SYNC_VERSIONS),
            process_id=self.process_id,
            limits={
                "max_record_bytes": schema.MAX_RECORD_BYTES,
                "max_content_chars": schema.MAX_CONTENT_CHARS,
                "max_tags": schema.MAX_TAGS,
                "max_directed_to": schema.MAX_DIRECTED,
                "max_links_per_entry": schema.MAX_LINKS_PER_ENTRY,
                "max_hops": MAX_HOPS,
                "max_page": 200,
                "max_subscriptions": MAX_SUBSCRIPTIONS,
                "max_batch_entries": MAX_BATCH,
            },
        )
