"""The writer's authority cache: every identity's key history, from the key events in the log (docs/format-v3.md 7.4).

Kept by the single writer and changed only by it, as it stores key events and vouch pages; loaded from the log by
the first ingest after a start (and again when the log's count of them differs from the cache's at the start of a
job that needs it: a write transaction that added some was rolled back). A record by an identity with no key events
and without `signing_key` is decided by `needs` alone: two dictionary lookups, no SQL (the writer-floor rule, issue
34). The histories are `identity.key_history.resolve` over the held events, and verdicts
`identity.key_history.key_verdict` over the held pages: the reference this cache must agree with.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from identity import key_history, vouching
from identity.key_history import History
from node.errors import InvalidInput
from node.spaces.judged import JudgedSpaces
from node.store.conn import POSTGRESQL, Conn, any_of, engine_of
from node.store.waiting import Dep

KEY_EVENT = "key_event"
VOUCH_PAGE = "vouch_page"
MAX_DROPPED_DEPS = 10_000  # dependency keys of dropped waiting records remembered for the wake-up (7.3)
LOSING_BRANCH = "losing_branch"  # an allowed key event outside the kept set (docs/format-v3.md 3.4)
AUTHORITY_KINDS = frozenset({KEY_EVENT, VOUCH_PAGE})  # decided first in a batch: the others are decided by them
# A stored record's body as JSON text PostgreSQL's json and jsonb parse: a `\u0000` escape (which both refuse to
# read out, whichever field holds it) written as `\u0001\u0001` and `\u0001` as `\u0001\u0002`, the node
# connection's text escape (node/store/pg_conn.py), so a text read out by `->>` is unescaped as the one stored
# (docs/decisions.md record 84).
BODY_JSON_TEXT_PG = (
    "replace(replace(convert_from(body, 'UTF8'), '\\u0001', '\\u0001\\u0002'), '\\u0000', '\\u0001\\u0001')"
)
# A stored record's `signing_key` (NULL when absent) on PostgreSQL, where the body is bytea and SQLite's
# `json_extract(body, '$.signing_key')` does not exist (docs/decisions.md record 50).
SIGNING_KEY_PG = f"{BODY_JSON_TEXT_PG}::jsonb ->> 'signing_key'"
Verdict = Literal["valid", "void", "undecided"]
EventVerdict = Literal["valid", "refused", "waiting"]
KeyStatus = tuple[bool, str | None, bool, bool, int]  # current, deciding event, losing, whole set known, pages held


@dataclass(frozen=True)
class Decision:
    """The verdict on a record, with the reason of a void one and the dependency keys an undecided one waits for."""

    verdict: Verdict
    reason: str | None = None
    deps: tuple[str, ...] = ()


VALID = Decision("valid")


def key_dep(author: str, key: str) -> str:
    """The dependency key of a record of `author` signed by `key`: a key event of `author` installing it."""
    return f"key:{author}:{key}"


def author_deps(author: str) -> tuple[str, str]:
    """The range [low, high) of every `key_dep` of `author`: what a new key event of `author` may decide."""
    return f"key:{author}:", f"key:{author};"  # ';' follows ':' in ASCII


def event_dep(address: str) -> str:
    """The dependency key of a record waiting for the record at `address` (a key event's prior)."""
    return f"event:{address}"


def pages_dep(event: str, subject: str) -> str:
    """The dependency key of a record waiting for the vouch pages of `event`'s vouch for `subject`."""
    return f"pages:{event}:{subject}"


def authority_count(conn: Conn) -> int:
    """How many key events and vouch pages the log holds (the partial index records_authority answers it)."""
    sql = "SELECT count(*) FROM records WHERE kind IN ('key_event', 'vouch_page')"
    return int(conn.execute(sql).fetchone()[0])


# What the authority cache is a function of, in one statement (record 90): the key events and vouch pages held (their
# count, and the highest seq: a seq is never reused, so one stored moves it even when another was dropped in the same
# transaction) and the key events this node dropped (a `losing_branch` refusal stores no record). With parameters:
# PostgreSQL plans a statement without any anew each time (psycopg sends it unprepared), 0.3 ms of this one's 0.4.
SIGNATURE_SQL = (
    "SELECT count(*), coalesce(max(seq), 0), (SELECT count(*) FROM dropped_key_events WHERE ? = ?)"
    " FROM records WHERE kind IN ('key_event', 'vouch_page')"
)


def authority_signature(conn: Conn) -> tuple[int, int, int]:
    """(key events and vouch pages held, their highest seq, key events dropped): equal before and after a write
    only if that write changed nothing the authority cache holds (`revalidate_txn`)."""
    count, newest, dropped = conn.execute(SIGNATURE_SQL, (1, 1)).fetchone()
    return int(count), int(newest), int(dropped)


def authority_records(conn: Conn) -> list[tuple[str, dict[str, Any]]]:
    """(address, record) of every key event and vouch page in the log, in log order."""
    rows = conn.execute(
        "SELECT hash, body FROM records WHERE kind IN ('key_event', 'vouch_page') ORDER BY seq"
    ).fetchall()
    return [(str(r[0]), json.loads(bytes(r[1]))) for r in rows]


def key_events_of(conn: Conn, author: str) -> list[tuple[str, dict[str, Any]]]:
    """(address, record) of every key event of `author` in the log (a read: `GET /v1/agents/{id}`)."""
    rows = conn.execute(
        "SELECT hash, body FROM records WHERE kind IN ('key_event', 'vouch_page') AND kind = 'key_event'"
        " AND author_id = ? ORDER BY seq",  # the IN lets SQLite use the partial index records_authority
        (author,),
    ).fetchall()
    return [(str(r[0]), json.loads(bytes(r[1]))) for r in rows]


def vouch_pages_of(conn: Conn, author: str) -> list[tuple[str, dict[str, Any]]]:
    """(address, record) of every vouch page of `author` in the log (an export: `bbs agent export`)."""
    rows = conn.execute(
        "SELECT hash, body FROM records WHERE kind = 'vouch_page' AND author_id = ? ORDER BY seq", (author,)
    ).fetchall()
    return [(str(r[0]), json.loads(bytes(r[1]))) for r in rows]


def dropped_keys(conn: Conn) -> dict[str, set[str]]:
    """author -> the keys installed by key events of it this node dropped (`drop_displaced_txn`, or refused as
    `losing_branch` on arrival): losing keys (docs/format-v3.md 3.4)."""
    out: dict[str, set[str]] = {}
    for author, key in conn.execute("SELECT author_id, key FROM dropped_key_events WHERE key IS NOT NULL"):
        out.setdefault(str(author), set()).add(str(key))
    return out


def remember_dropped_txn(
    conn: Conn, address: str, record: dict[str, Any], state: key_history.KeyState, now_ms: int
) -> None:
    """Remember an allowed key event this node does not keep (3.4): its key (a losing key), the state it led to (an
    event building on it is judged in it) and its address (never fetched again, like an evicted version)."""
    encoded = {"key": state.key, "next": state.next, "recovery": state.recovery, "used": sorted(state.used)}
    conn.execute(
        "INSERT INTO dropped_key_events (address, author_id, key, seq, state, dropped_ms) VALUES (?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (address) DO NOTHING",
        (address, record["author_id"], record.get("key"), record["seq"], json.dumps(encoded), now_ms),
    )
    conn.execute(
        "INSERT INTO refused_versions (version, hash, refused_ms) VALUES (?, ?, ?) ON CONFLICT (version) DO NOTHING",
        (address, address, now_ms),  # a key event's version is its address
    )


def dropped_counts(conn: Conn) -> tuple[int, int]:
    """(key events, identities) this node dropped as `losing_branch` (`bbs doctor`)."""
    events, authors = conn.execute("SELECT count(*), count(DISTINCT author_id) FROM dropped_key_events").fetchone()
    return int(events), int(authors)


def dropped_state(conn: Conn, address: str) -> tuple[int, key_history.KeyState] | None:
    """(seq, state after it) of a key event this node dropped, or None."""
    row = conn.execute("SELECT seq, state FROM dropped_key_events WHERE address = ?", (address,)).fetchone()
    if row is None:
        return None
    state = json.loads(row[1])
    return int(row[0]), key_history.KeyState(state["key"], state["next"], state["recovery"], frozenset(state["used"]))


def judge_event_txn(
    conn: Conn, authority: Authority, address: str, record: dict[str, Any], now_ms: int
) -> tuple[EventVerdict, str | None]:
    """`Authority.judge_event`, and what needs the log (3.4): an event whose prior this node dropped is judged in the
    state that prior led to (allowed: it is dropped too, `losing_branch`), and an allowed event outside the kept set
    is remembered as dropped (`remember_dropped_txn`): its key loses whatever the arrival order."""
    verdict, reason = authority.judge_event(address, record)
    if verdict == "waiting" and record.get("prior") is not None:
        found = dropped_state(conn, str(record["prior"]))
        if found is None:
            return verdict, reason
        seq, before = found
        reason = "bad_seq" if record["seq"] != seq + 1 else key_history.refusal(before, record) or LOSING_BRANCH
        verdict = "refused"
        after = key_history.apply(before, record)
    elif reason == LOSING_BRANCH:
        after = authority.state_after(record)
    if reason == LOSING_BRANCH:
        remember_dropped_txn(conn, address, record, after, now_ms)
        authority.note_losing(record["author_id"], record)
    return verdict, reason


def drop_displaced_txn(conn: Conn, authority: Authority, authors: Iterable[str], now_ms: int) -> list[str]:
    """Drop the held key events of `authors` that a better event has displaced from the kept set (docs/format-v3.md
    3.4: the winning chain and one runner-up per place): each is deleted from the log with its vouch pages and
    remembered (`remember_dropped_txn`), as an evicted version is. Runs in the transaction that stored key events,
    before the authors' records are decided again. Returns the addresses dropped."""
    dropped: list[str] = []
    for author in sorted(set(authors)):
        states = authority.history(author).states
        for address in authority.displaced(author):
            record, pages = authority.drop_event(author, address)
            remember_dropped_txn(conn, address, record, states[address], now_ms)
            gone = [address, *pages]
            test, listed = any_of(conn, gone)
            conn.execute(f"DELETE FROM records WHERE hash {test}", (listed,))
            conn.executemany(
                "INSERT INTO refused_versions (version, hash, refused_ms) VALUES (?, ?, ?)"
                " ON CONFLICT (version) DO NOTHING",
                [(page, page, now_ms) for page in pages],
            )
            dropped.append(address)
    return dropped


def versions_signed_by(conn: Conn, author: str, key: str) -> list[str]:
    """The versions of every record of `author` in the log signed by `key` (its first key: no `signing_key`), key
    events and vouch pages aside (6.1): the set a rotation by the node vouches for. Scans the log (no index on
    the author: a rotation is rare)."""
    signing_key = SIGNING_KEY_PG if engine_of(conn) == POSTGRESQL else "json_extract(body, '$.signing_key')"
    rows = conn.execute(
        f"SELECT version, {signing_key} FROM records WHERE author_id = ? AND kind NOT IN ('key_event', 'vouch_page')",
        (author,),
    ).fetchall()
    return sorted({str(r[0]) for r in rows if (r[1] if r[1] is not None else author) == key})


@dataclass
class Authority:
    """Key histories of the identities with key events, as the log holds them (see the module's docstring)."""

    _events: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)  # author -> address -> event
    _histories: dict[str, History] = field(default_factory=dict)
    # (event, subject) -> page index -> versions, of the verified vouch pages held
    _pages: dict[tuple[str, str], dict[int, list[str]]] = field(default_factory=dict)
    _page_addresses: set[str] = field(default_factory=set)
    _page_events: dict[str, str] = field(default_factory=dict)  # vouch page address -> its key event's address
    # (event, subject) -> every version on its held pages: a record on one is vouched for, one set lookup
    _vouched: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    # (event, subject) -> the whole vouched set, proven by `vouching.matches` over the versions the log holds (6.5)
    _known: dict[tuple[str, str], frozenset[str]] = field(default_factory=dict)
    _count: int = -1  # key events and vouch pages the cache holds; -1: not loaded
    # author -> keys installed by key events of it this node dropped (3.4): losing keys, whatever the arrival order
    _losing: dict[str, set[str]] = field(default_factory=dict)
    # author -> key -> its `key_status` when `node.store.void.reflag_txn` last decided the author's stored records
    _settled: dict[str, dict[str, KeyStatus]] = field(default_factory=dict)
    changes: int = 0  # moves whenever the key events held may have changed (read by the event loop: sessions)
    # (dependency keys, last waiting id checked) left for the writer's next jobs: more than one transaction re-checks
    pending: list[tuple[tuple[Dep, ...], int]] = field(default_factory=list)
    # dependency key -> peers whose records waiting for it a full cap dropped (docs/format-v3.md 7.3), at most
    # MAX_DROPPED_DEPS keys (the oldest forgotten first: the 300 s reconciliation round still brings their records)
    _dropped: dict[str, set[str]] = field(default_factory=dict)
    # peers to reconcile with at once: a dependency of records they sent and a cap dropped is now stored
    wake: set[str] = field(default_factory=set)
    # the space gate's resolutions of spaces' structure records, each checked against its inputs before use
    # (node/spaces/judged.py; node/federation/space_gate.py)
    judged: JudgedSpaces = field(default_factory=JudgedSpaces)
    # `authority_signature` when the cache was last loaded or revalidated (None: not since it was loaded)
    signature: tuple[int, int, int] | None = None

    @property
    def loaded(self) -> bool:
        """Whether the cache has been loaded from the log (records needing no key history never load it)."""
        return self._count >= 0

    def needs(self, record: dict[str, Any]) -> bool:
        """Whether deciding `record` needs the key history: a key event, a `signing_key`, or an author that has
        key events. False costs two dictionary lookups and no SQL."""
        return (
            "signing_key" in record or record.get("kind") in AUTHORITY_KINDS or record.get("author_id") in self._events
        )

    def ensure_txn(self, conn: Conn) -> None:
        """Load the cache from the log unless it holds exactly the log's key events (by count)."""
        if self._count < 0 or authority_count(conn) != self._count:
            self.load_txn(conn)

    def load_txn(self, conn: Conn) -> None:
        """(Re)build the cache from the log's key events and vouch pages (each stored only once verified)."""
        self.signature = authority_signature(conn)
        self._events, self._histories, self._pages, self._page_addresses = {}, {}, {}, set()
        self._page_events = {}
        self._vouched, self._known, self._settled = {}, {}, {}
        self._losing = dropped_keys(conn)
        rows = authority_records(conn)
        for address, record in rows:
            if record["kind"] == KEY_EVENT:
                self._events.setdefault(record["author_id"], {})[address] = record
            else:
                self._take_page(address, record)
        self._count = len(rows)
        self.changes += 1

    def note_dropped(self, deps: Iterable[Dep], peer_id: str) -> None:
        """Remember that a cap dropped a record from `peer_id` waiting for `deps` (in memory, bounded)."""
        for dep in deps:
            if isinstance(dep, str):
                self._dropped.setdefault(dep, set()).add(peer_id)
        while len(self._dropped) > MAX_DROPPED_DEPS:
            del self._dropped[next(iter(self._dropped))]

    def resolve_dropped(self, resolved: Iterable[Dep]) -> None:
        """Dependencies now decided: the peers whose dropped records waited for any of them go into `wake`."""
        if not self._dropped:
            return
        for dep in resolved:
            if isinstance(dep, str):
                self.wake |= self._dropped.pop(dep, set())
            else:
                low, high = dep
                for key in [k for k in self._dropped if low <= k < high]:
                    self.wake |= self._dropped.pop(key)

    def take_wake(self) -> set[str]:
        """The peers to reconcile with at once (`wake`), emptied."""
        peers, self.wake = self.wake, set()
        return peers

    def invalidate(self) -> None:
        """Forget everything: the next `ensure_txn` loads from the log (after a write that may have rolled back)."""
        self._count = -1
        self.signature = None

    def history(self, author: str) -> History:
        """The key history of `author` over the key events held (an identity with none: the initial state)."""
        found = self._histories.get(author)
        if found is None:
            found = key_history.resolve(author, self._events.get(author, {}).items())
            dropped = self._losing.get(author, set()) - found.state.used
            if dropped:  # the keys of dropped events lose as if their events were held (3.4, 3.5 rule 4)
                found = dataclasses.replace(found, losing_keys=found.losing_keys | dropped)
            if author in self._events:
                self._histories[author] = found
        return found

    def holds_event(self, address: str, author: str) -> bool:
        """Whether the key event at `address` of `author` is held."""
        return address in self._events.get(author, {})

    def judge_event(self, address: str, record: dict[str, Any]) -> tuple[EventVerdict, str | None]:
        """The verdict on a key event given the held ones (docs/format-v3.md 3.3): `valid` (allowed in the state
        its prior leads to; also when already held), `refused` with the reason (never allowed), or `waiting` (its
        prior is not held)."""
        author = record["author_id"]
        held = self._events.get(author, {})
        if address in held:
            return "valid", None
        trial = key_history.resolve(author, [*held.items(), (address, record)])
        if address in trial.refused:
            return "refused", trial.refused[address]
        if address in trial.waiting:
            return "waiting", None
        if address not in trial.kept:  # allowed, but a node keeps only the chain and one runner-up per place (3.4)
            return "refused", LOSING_BRANCH
        return "valid", None

    def displaced(self, author: str) -> list[str]:
        """The held key events of `author` outside the kept set (3.4): displaced by better events taken since."""
        kept = self.history(author).kept
        return sorted(address for address in self._events.get(author, {}) if address not in kept)

    def drop_event(self, author: str, address: str) -> tuple[dict[str, Any], list[str]]:
        """Forget a displaced key event and its vouch pages (`drop_displaced_txn` deletes them from the log); its key
        becomes a losing key. Returns the event and the addresses of its pages."""
        record = self._events[author].pop(address)
        pages = sorted(a for a, event in self._page_events.items() if event == address)
        for page in pages:
            del self._page_events[page]
            self._page_addresses.discard(page)
        for held in [k for k in self._pages if k[0] == address]:
            self._pages.pop(held)
            self._vouched.pop(held, None)
            self._known.pop(held, None)
        self.note_losing(author, record)
        self._count -= 1 + len(pages)
        self.signature = None  # stale: the next `revalidate_txn` loads again
        return record, pages

    def key_statuses(self, author: str) -> dict[str, KeyStatus]:
        """What decides the records of each key `author`'s history names (`decide` reads nothing else): whether it is
        the current key, the event whose vouch decides its records, whether it loses, and how that vouch is known
        (its whole set, or how many of its pages are held)."""
        history = self.history(author)
        named = history.state.used | history.losing_keys | history.removed_by.keys() | history.vouched_by.keys()
        out: dict[str, KeyStatus] = {}
        for key in named:
            removal = history.removed_by.get(key) or history.vouched_by.get(key)
            known = removal is not None and (removal, key) in self._known
            pages = 0 if removal is None or known else len(self._pages.get((removal, key), {}))
            out[key] = (key == history.state.key, removal, key in history.losing_keys, known, pages)
        return out

    def changed_keys(self, author: str) -> tuple[dict[str, KeyStatus], set[str] | None]:
        """The keys of `author` whose status changed since `settle` was last told of it (None: every key, for an author
        not settled since the cache was loaded), with the statuses now."""
        now = self.key_statuses(author)
        before = self._settled.get(author)
        if before is None:
            return now, None
        return now, {key for key, status in now.items() if before.get(key) != status} | (before.keys() - now.keys())

    def settle(self, author: str) -> None:
        """Remember the statuses of `author`'s keys: its stored records were decided by them (`reflag_txn`)."""
        self._settled[author] = self.key_statuses(author)

    def install_address(self, author: str, key: str) -> str | None:
        """The held key event that installed `key` for `author` (None: its first key, or a dropped event's key)."""
        for address, record in self._events.get(author, {}).items():
            if record.get("key") == key:
                return address
        return None

    def state_after(self, record: dict[str, Any]) -> key_history.KeyState:
        """The state an allowed key event whose prior is held (or that has none) leads to."""
        author, prior = str(record["author_id"]), record.get("prior")
        before = key_history.initial_state(author) if prior is None else self.history(author).states[str(prior)]
        return key_history.apply(before, record)

    def note_losing(self, author: str, record: dict[str, Any]) -> None:
        """Take the key a dropped (or refused as `losing_branch`) event installed as a losing key of `author`."""
        if record.get("key") is not None:
            self._losing.setdefault(author, set()).add(str(record["key"]))
        self._histories.pop(author, None)
        self.signature = None
        self.changes += 1

    def add_event(self, address: str, record: dict[str, Any]) -> None:
        """Take a valid key event into the cache (the caller stores it in the log in this transaction)."""
        held = self._events.setdefault(record["author_id"], {})
        if address not in held:
            held[address] = record
            self._count += 1
            self.changes += 1
            self._histories.pop(record["author_id"], None)
            self.signature = None

    def judge_page(self, address: str, record: dict[str, Any]) -> tuple[EventVerdict, str | None]:
        """The verdict on a vouch page (docs/format-v3.md 6.4): `waiting` until its event is held; then `valid` when
        it is signed by the event's signer and its proof verifies against the event's vouch for its subject, else
        `refused` (`bad_vouch_page`), for good (the event fixes both)."""
        if address in self._page_addresses:
            return "valid", None
        event = self._events.get(record["author_id"], {}).get(record["event"])
        if event is None:
            return "waiting", None
        if key_history.signer_of(record) != key_history.signer_of(event):
            return "refused", "bad_vouch_page"
        vouch = vouching.vouch_for(event, record["subject"])
        if vouch is None or not vouching.verify_page(vouch, record["page"], record["versions"], record["proof"]):
            return "refused", "bad_vouch_page"
        return "valid", None

    def add_page(self, address: str, record: dict[str, Any]) -> None:
        """Take a valid vouch page into the cache (the caller stores it in the log in this transaction)."""
        if address not in self._page_addresses:
            self._take_page(address, record)
            self._count += 1
            self.signature = None

    def holds_page(self, address: str) -> bool:
        """Whether the vouch page at `address` is held."""
        return address in self._page_addresses

    def _take_page(self, address: str, record: dict[str, Any]) -> None:
        self._page_addresses.add(address)
        self._page_events[address] = str(record["event"])
        self._pages.setdefault((record["event"], record["subject"]), {})[record["page"]] = list(record["versions"])
        self._vouched.setdefault((record["event"], record["subject"]), set()).update(record["versions"])

    def removal_of(self, author: str, signer: str) -> str | None:
        """The key event that removed `signer` from `author`'s history and whose vouch decides its records (None for
        the current key, a key no held event removed, or a losing branch's key)."""
        history = self.history(author)
        if signer == history.state.key:
            return None
        return history.removed_by.get(signer) or history.vouched_by.get(signer)

    def learn_vouched(self, author: str, signer: str, versions: set[str]) -> bool:
        """Take `versions` (every record of `author` signed by `signer` that the log holds) as the vouched set of
        the event that removed `signer` when they are exactly that set (docs/format-v3.md 6.5, `vouching.matches`):
        then each of them is vouched and every other version signed by `signer` is void, without any page. Returns
        whether the set is known (now or already); a set that does not match (a thief's extra record, or a vouched
        record not held yet) teaches nothing, and its records are decided by their pages."""
        removal = self.removal_of(author, signer)
        if removal is None:
            return False
        if (removal, signer) in self._known:
            return True
        vouch = vouching.vouch_for(self.history(author).events[removal], signer)
        if vouch is None or len(versions) != vouch.count or not vouching.matches(vouch, versions):
            return False
        self._known[(removal, signer)] = frozenset(versions)
        return True

    def decide(self, record: dict[str, Any], version: str) -> Decision:
        """The verdict on a record that is not a key event or vouch page, by the key that signed it
        (docs/format-v3.md 3.5): a record of a rotated-out key by the vouch that removed it, over the pages held."""
        return self.decide_key(record["author_id"], key_history.signer_of(record), version)

    def decide_key(self, author: str, signer: str, version: str) -> Decision:
        """`decide` for the record of `version` by `author` signed by `signer` (what `decide` reads of a record)."""
        history = self.history(author)
        if signer != history.state.key:  # a rotated-out key: a version on a held page of its vouch is vouched for
            removal = history.removed_by.get(signer) or history.vouched_by.get(signer)
            if removal is not None and version in self._vouched.get((removal, signer), ()):
                return VALID  # what key_verdict answers, without parsing the vouch and scanning pages
            known = self._known.get((removal, signer)) if removal is not None else None
            if known is not None and removal is not None:  # the whole vouched set is known: no page needed
                if version in known:
                    return VALID
                revoked = history.events[removal]["event"] == "revoke"
                return Decision("void", "revoked_key" if revoked else "unvouched")
        verdict = key_history.key_verdict(history, signer, version, self._pages)
        if verdict == "valid":
            return VALID
        removal = history.removed_by.get(signer) or history.vouched_by.get(signer)
        if verdict == "void":
            if removal is None:
                return Decision("void", "losing_branch")
            revoked = history.events[removal]["event"] == "revoke"
            return Decision("void", "revoked_key" if revoked else "unvouched")
        if removal is not None:
            return Decision("undecided", deps=(pages_dep(removal, signer), key_dep(author, signer)))
        return Decision("undecided", deps=(key_dep(author, signer),))


def authorize_txn(conn: Conn, authority: Authority, items: list[tuple[dict[str, Any], str, str]]) -> None:
    """Refuse, before it is appended, a record a client submitted (or the node signed) whose key may not sign for
    its author: the same verdict as sync ingest's (`Authority.decide`, docs/format-v3.md 3.5), but a client's record
    never waits (7.1). `items` are (record, version, JSON path of the record in the request). A record needing no key
    history (`Authority.needs` false) costs two dictionary lookups; the cache is loaded once after a start, and
    compared with the log (a count) when a record needs it. Key events are stored only by the serving process (sync,
    this REST path; `bbs agent rotate-signing-key` refuses a served folder), so the cache knows every author that
    has some. Raises 422:

    - `unknown_signing_key`: no key event held here installs the key (`field`: the key's member);
    - `vouch_pages_missing`: the key was rotated out and the vouch pages that decide this record are not held;
    - `not_current_key`: the key may not sign this record (rotated out and not vouched for, revoked, or a losing
      branch's); the reason is in the message.
    """
    if not authority.loaded:  # once after a start: which identities have key events at all
        authority.ensure_txn(conn)
    needed = [item for item in items if authority.needs(item[0])]
    if needed:  # as sync ingest does: the log's key events, not only the cache's (one count on a partial index)
        authority.ensure_txn(conn)
    for record, version, where in needed:
        decision = authority.decide(record, version)
        if decision.verdict == "valid":
            continue
        member = "signing_key" if "signing_key" in record else "author_id"
        signer = key_history.signer_of(record)
        field_path = f"{where}.{member}"
        if decision.verdict == "void":
            raise InvalidInput(
                f"key {signer} may not sign this record for {record['author_id']}: {decision.reason}",
                field=field_path,
                code="not_current_key",
            )
        if any(dep.startswith("pages:") for dep in decision.deps):
            raise InvalidInput(
                f"key {signer} was rotated out and the vouch pages that decide this record are not held here",
                field=field_path,
                code="vouch_pages_missing",
            )
        raise InvalidInput(
            f"no key event held here installs {signer} for {record['author_id']}; submit the key event first",
            field=field_path,
            code="unknown_signing_key",
        )


def revalidate_txn(authority: Authority, conn: Conn) -> bool:
    """Another process of the node committed since this one last wrote (node/store/write_clock.py, record 90): load
    `authority` again if the log's key events, vouch pages or dropped events are not the ones it was loaded from
    (`authority_signature`, one statement). Whether it was loaded (again): a cache not loaded yet is loaded now, so
    whoever follows the key events (the node's signing keys) looks once."""
    signature = authority_signature(conn)
    if signature == authority.signature:
        return False
    authority.load_txn(conn)
    return True
