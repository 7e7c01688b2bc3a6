"""The projectors of a space's records, and the vouched-set rule on a node (issue 37; docs/spaces.md, "Removal with
posts"; docs/format-v3.md 4 and 6).

Every `space`, `space_member`, `space_admin` and `space_host` record, and every `vouch_page` of a space (a removal's
page: its `space` is set), is listed in `space_records` and recomputes its space's rows (`store.recompute_txn`).
Then the posts whose verdict that may have changed are judged again with `identity.spaces.resolve` over the space's
records held and them (`rejudge_posts_txn`): a removed writer's posts count only when the removal's vouched set names
them, whatever their date, so a client-signed removal vouching for fewer posts than the node holds voids the rest.
A void post is flagged out of every projection by the mechanism of records voided by key events
(node/store/void.py: `void_records`, the kinds' `Switch`es): sync never serves it, the digest leaves it out, `bbs
rebuild` replays without it. Its reason is `space_` and `resolve`'s (`space_unvouched`, `space_not_a_member`, ...),
and only its space unflags it: when a later record gives its author a role that writes again, or vouches for it.

A post arriving after its author's removal is judged as it arrives: from a peer by node/federation/space_gate.py
(a void one is refused, an undecided one waits for the removal's pages), from a client by node/spaces/posts.py (the
author may not write). Either way the node ends with the same posts shown, whatever the order: the set rule.

The cost stays on membership records: a batch of posts recomputes nothing; a membership record reads the posts of
the agents a membership record once made writers or admins that may not write now (and of authors of posts flagged
by their space), and none when there is none.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from identity import spaces
from identity.space_rules import may_write
from node.spaces import store
from node.store import projections, void
from node.store.conn import Conn

MEMBER_KINDS = frozenset({"space_member", "space_admin"})
WRITES = frozenset({"writer", "admin"})  # a role a membership record gives that posts: who may have posts held


def project_space_record(conn: Conn, rec: Any, ctx: projections.Projection) -> None:
    """Projector of `space`, `space_member`, `space_admin` and `space_host`: list the record in its space, recompute
    that space's rows and judge again its posts stored before it (`rejudge_posts_txn`)."""
    kind = str(rec.kind)
    space_id = ctx.hash if kind == "space" else str(rec.space)
    store.list_record_txn(conn, ctx.seq, space_id, kind, str(rec.author_id))
    _recompute(conn, space_id, ctx.now_ms, before=ctx.seq)


def project_vouch_page(conn: Conn, rec: Any, ctx: projections.Projection) -> None:
    """Projector of `vouch_page`: a key event's page feeds the authority cache (`projections.project_key_event`); a
    page of a space's removal (its `space` set) is also listed in `space_records` (kind `vouch_page`) and recomputes
    its space, since it decides which of the removed member's posts still count."""
    projections.project_key_event(conn, rec, ctx)
    space_id = getattr(rec, "space", None)
    if isinstance(space_id, str):
        store.list_record_txn(conn, ctx.seq, space_id, "vouch_page", str(rec.author_id))
        _recompute(conn, space_id, ctx.now_ms, before=ctx.seq)


def switch_space_record(conn: Conn, seq: int, address: str, record: dict[str, Any], valid: bool, now_ms: int) -> None:
    """The switch of a space record flagged void or back (node/store/void.py: a key event made its key verdict
    change): recompute its space, whose records held no longer count the flagged ones, and judge its posts again."""
    _recompute(conn, store.space_of(str(record["kind"]), address, record), now_ms, before=None)


def _recompute(conn: Conn, space_id: str, now_ms: int, before: int | None) -> None:
    resolved, held = store.recompute_txn(conn, space_id)
    if resolved is not None:
        rejudge_posts_txn(conn, resolved, held, now_ms, before)


def rejudge_posts_txn(
    conn: Conn, resolved: spaces.Space, held: Sequence[spaces.Held], now_ms: int, before: int | None = None
) -> tuple[int, int]:
    """Decide again, with `resolve` over the space's records `held` and them, the stored posts (stored before seq
    `before`: the record being projected, so `bbs rebuild` judges only what it replayed) of every agent a membership
    record ever made a writer or an admin that may not write now, and of every author of a post its space flagged;
    flag the void ones (reason `space_<reason>`), unflag the valid ones its space flagged (`void.flag_txn`); an
    undecided one (the removal's pages not all held) keeps its state. Returns (flagged, unflagged)."""
    writers = {agent for agent, role in resolved.roles.items() if may_write(role)}
    named = {str(h.record["member"]) for h in held if h.record["kind"] in MEMBER_KINDS and h.record["role"] in WRITES}
    authors = (named - writers) | store.flagged_authors(conn, resolved.id, void.SPACE_REASON)
    posts = store.posts_by(conn, resolved.id, authors, before) if authors else []
    if not posts:
        return 0, 0
    every = [*held, *(h for _, _, h in posts)]
    decisions = spaces.resolve(every, store.key_verdicts_txn(conn, (h.record["author_id"] for h in every))).decisions
    flags = void.flags_of(conn, [seq for seq, _, _ in posts])
    voided: list[tuple[void.Stored, str]] = []
    restored: list[void.Stored] = []
    for seq, kind, post in posts:
        decision = decisions[post.version]
        stored = void.Stored(seq, post.address, post.version, kind, str(post.record["author_id"]), "")
        reason = flags.get(seq)
        if decision.verdict == "void" and reason is None:
            voided.append((stored, void.SPACE_REASON + (decision.reason or "void")))
        elif decision.verdict == "valid" and reason is not None and reason.startswith(void.SPACE_REASON):
            restored.append(stored)
    return void.flag_txn(conn, voided, restored, now_ms)
