"""Which identity document of an agent the `agents` table shows: the newest by its author's key history
(docs/format-v3.md 3.8, `identity.key_history.document_rank`), the same on every node holding the same records.

A document arriving is compared with the one shown: by key place first, then `(created_at, hash)` (only the
key order is read from the log, and only when the two are signed by different keys). A key event or vouch page of
the author being stored can change the key order or a verdict: `rerank_txn` then chooses again among every document
of the author in the log, judged by the log's key events and pages, so a document signed by a key the history
voids never stays shown and lease forwarding never trusts its `home_node`.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from identity import key_history, vouching
from identity.schema import AgentRecord
from node.store.authority import key_events_of
from node.store.conn import Conn
from wire.time import parse_ms

UPSERT = (
    "INSERT INTO agents (id, display_name, description, home_node, created_at, created_ms, doc_hash, agent_type)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (id) DO UPDATE SET display_name = excluded.display_name, description = excluded.description,"
    "   home_node = excluded.home_node, created_at = excluded.created_at, created_ms = excluded.created_ms,"
    "   doc_hash = excluded.doc_hash, agent_type = excluded.agent_type"
)


def _show_txn(conn: Conn, record: dict[str, Any] | AgentRecord, address: str) -> None:
    """Make `record` (a document, as a dict or decoded) the one shown for its author."""
    get = record.get if isinstance(record, dict) else (lambda name, default=None: getattr(record, name, default))
    agent_type = get("agent_type", None)
    conn.execute(
        UPSERT,
        (
            get("author_id"),
            get("display_name"),
            get("description"),
            get("home_node"),
            get("created_at"),
            parse_ms(str(get("created_at"))),
            address,
            None if agent_type is None or agent_type is msgspec.UNSET else agent_type,
        ),
    )


def signer_of_decoded(rec: AgentRecord) -> str:
    """The key that signed a decoded document: its `signing_key`, else its author's first key."""
    named = getattr(rec, "signing_key", msgspec.UNSET)
    return rec.author_id if named is msgspec.UNSET else str(named)


def outranks_txn(conn: Conn, rec: AgentRecord, address: str) -> bool:
    """Whether the document `rec` at `address` (valid: the writer decided it) ranks above the one shown for its
    author (`document_rank`), or none is shown. No key order is read when both are signed by one key."""
    row = conn.execute(
        "SELECT a.doc_hash, a.created_ms, r.body FROM agents a LEFT JOIN records r ON r.hash = a.doc_hash"
        " WHERE a.id = ?",
        (rec.author_id,),
    ).fetchone()
    if row is None:
        return True
    shown_hash, shown_ms, body = row
    signer = signer_of_decoded(rec)
    shown_signer = rec.author_id if body is None else key_history.signer_of(json.loads(bytes(body)))
    order = (
        {}
        if signer == shown_signer
        else key_history.key_order(key_history.resolve(rec.author_id, key_events_of(conn, rec.author_id)))
    )
    new = key_history.document_rank(order, signer, parse_ms(rec.created_at), address, "valid")
    old = key_history.document_rank(order, shown_signer, int(shown_ms), str(shown_hash), "valid")
    return new > old


def project_txn(conn: Conn, rec: AgentRecord, address: str) -> None:
    """Project an arriving document: shown if it ranks above the one shown (`outranks_txn`)."""
    if outranks_txn(conn, rec, address):
        _show_txn(conn, rec, address)


def documents_of(conn: Conn, author: str) -> list[tuple[str, str, dict[str, Any]]]:
    """(address, version, record) of every identity document of `author` in the log (a scan: no index on the
    author; run when a key event or a page of the author is stored, which is rare)."""
    rows = conn.execute(
        "SELECT hash, version, body FROM records WHERE kind = 'agent' AND author_id = ?", (author,)
    ).fetchall()
    return [(str(r[0]), str(r[1]), json.loads(bytes(r[2]))) for r in rows]


def pages_of(conn: Conn, author: str) -> dict[tuple[str, str], dict[int, list[str]]]:
    """The vouch pages of `author` in the log, as `identity.key_history.key_verdict` takes them."""
    rows = conn.execute(
        "SELECT body FROM records WHERE kind IN ('key_event', 'vouch_page') AND kind = 'vouch_page'"
        " AND author_id = ?",  # the IN lets SQLite use the partial index records_authority
        (author,),
    ).fetchall()
    out: dict[tuple[str, str], dict[int, list[str]]] = {}
    for (body,) in rows:
        page = json.loads(bytes(body))
        out.setdefault((page["event"], page["subject"]), {})[int(page["page"])] = list(page["versions"])
    return out


def rerank_txn(conn: Conn, author: str) -> None:
    """Choose the shown document of `author` again among all of the log's, each judged by the log's key events and
    pages (`identity.key_history.key_verdict`; an undecided one, whose pages are not held, ranks with the valid:
    it was valid when stored), by `document_rank`."""
    docs = documents_of(conn, author)
    if not docs:
        return
    history = key_history.resolve(author, key_events_of(conn, author))
    order = key_history.key_order(history)
    pages = pages_of(conn, author)

    def rank(doc: tuple[str, str, dict[str, Any]]) -> key_history.DocumentRank:
        address, version, record = doc
        signer = key_history.signer_of(record)
        verdict = key_history.key_verdict(history, signer, version, pages)
        verdict = "valid" if verdict == "undecided" else verdict
        return key_history.document_rank(order, signer, parse_ms(record["created_at"]), address, verdict)

    address, _, record = max(docs, key=rank)
    _show_txn(conn, record, address)


def on_authority_record_txn(conn: Conn, record: Any, address: str) -> dict[str, int] | None:
    """A key event or vouch page of an author was appended (at `address`): rerank its documents when that can
    change which one is shown. Returns the author's new key order when a key event reordered its keys (a key
    changed place or left the chain: a recovery, a fork won by a better role), else None.

    Reranked: after a reordering; when the shown document is now void or signed by a key outside the chain. A
    page only turns undecided documents valid or void, and an undecided one already ranks as valid, so only the
    shown one's verdict matters, and only a page of its key's vouch can change it (judged alone: see below). These
    checks read the author's key events (an index; a key event also its pages); a rerank scans the log."""
    author = str(record.author_id)
    row = conn.execute(
        "SELECT r.version, r.body FROM agents a JOIN records r ON r.hash = a.doc_hash WHERE a.id = ?", (author,)
    ).fetchone()
    signer = None if row is None else key_history.signer_of(json.loads(bytes(row[1])))
    if record.kind == "vouch_page" and signer != record.subject:
        return None  # it decides records of another key than the shown document's: nothing to rerank
    events = key_events_of(conn, author)
    history = key_history.resolve(author, events)
    order = key_history.key_order(history)
    reordered = None
    if record.kind == "key_event":
        before = key_history.key_order(key_history.resolve(author, [e for e in events if e[0] != address]))
        if any(order.get(key) != place for key, place in before.items()):
            reordered = order
    if row is None or signer is None:
        return reordered
    if record.kind == "vouch_page":
        # this page alone, as `identity.vouching.verdict` takes pages: the shown version in it (vouched), inside
        # its range or beyond an end page without being in it (void); otherwise its neighbours decide, and the
        # shown document stays until they do (reading every page of the author per page would cost the square of
        # their number: 98 pages of a 100,000-record rotation)
        removal = history.removed_by.get(signer) or history.vouched_by.get(signer)
        if removal is None or removal != record.event:
            return None
        one = {int(record.page): list(record.versions)}
        if vouching.decide(str(row[0]), history.events[removal], signer, one) == "void":
            rerank_txn(conn, author)
        return None
    stale = reordered is not None or signer not in order
    if stale or key_history.key_verdict(history, signer, str(row[0]), pages_of(conn, author)) == "void":
        rerank_txn(conn, author)
    return reordered
