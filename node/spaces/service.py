"""Spaces on one node (issue 37, part 1; docs/spaces.md): create a space, add, change and remove members, name its
hosting nodes (issue 38), list them.

A client's record (a self-signing agent's `{"record": ...}`, or one the node signs for a node-kept agent) is decided
in the storing transaction by `identity.spaces.resolve` over the space's records held and it: stored when valid,
refused otherwise with a stable code, nothing stored. Unlike a peer's, a client's record never waits
(docs/format-v3.md 7.1). A space's records are stored with scope `local`: until part 2 they never leave the node.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Callable, Sequence
from typing import Any

from identity import canonical, keys, spaces, vouching
from identity.space_rules import may_read
from node.errors import BBSError, Conflict, Forbidden, InvalidInput, NotFound
from node.redaction import effects as redaction_effects
from node.spaces import store
from node.spaces.sight import stored_scope
from node.store import projections
from node.store.conn import Conn
from node.store.db import Database
from node.store.sealing import Sealing, check_authored, sign_and_check_body
from sync.store import Verified
from wire.spaces import MemberOut, SpaceList, SpaceOut, SpaceSubmitted

SPACE = "space"
MEMBER_KINDS = ("space_member", "space_admin")
HOST = "space_host"
OPERATOR = "operator"  # the role the node's admin is shown with: the operator reads every space it holds
VOUCH_PAGE = "vouch_page"
Step = tuple[dict[str, Any], list[str]]  # an unsigned chain record, and the versions its vouch names (sorted)


def nonce() -> str:
    """32 random bytes as unpadded base64url: a space's `nonce` (two spaces of one name and second are two)."""
    return base64.urlsafe_b64encode(os.urandom(32)).rstrip(b"=").decode()


def refusal(decision: spaces.Decision, where: str = "$.record") -> BBSError:
    """The client-facing error for a record `resolve` does not find valid (docs/spaces.md, "Errors")."""
    reason = decision.reason or ""
    waits = sorted(decision.waits_for)
    if decision.verdict == "undecided":
        first = waits[0] if waits else ""
        if first.startswith("space:"):
            return NotFound("no such space here", field=f"{where}.space", code="unknown_space")
        if first.startswith("event:"):
            return Conflict("the record's prior is not held here", field=f"{where}.prior", code="unknown_prior")
        if first.startswith("member:"):
            return Forbidden("the signer is not an admin of the space", field=f"{where}.author_id",
                             code="not_a_space_admin")  # fmt: skip
        if first.startswith("pages:"):
            return InvalidInput("the removal's vouched set needs its pages", field=f"{where}.vouches",
                                code="missing_vouch_pages")  # fmt: skip
        return InvalidInput("the record's signing key is not installed here", field=f"{where}.signing_key",
                            code="unknown_signing_key")  # fmt: skip
    if reason in ("unauthorized_membership", "not_an_admin"):
        return Forbidden("the signer may not change this membership", field=f"{where}.author_id",
                         code="not_a_space_admin")  # fmt: skip
    if reason in ("losing_branch", "prior_void"):
        return Conflict("another record already follows this prior (a fork): sign after the chain's head",
                        field=f"{where}.prior", code="prior_conflict")  # fmt: skip
    if reason == "bad_seq":
        return Conflict("seq must be one more than its prior's", field=f"{where}.seq", code="bad_seq")
    if reason in ("missing_vouch", "unexpected_vouch"):
        return InvalidInput("a lowering of a role names what it still vouches for, and only a lowering does",
                            field=f"{where}.vouches", code=reason)  # fmt: skip
    return InvalidInput(f"this record may never count: {reason}", field=where, code=reason or "invalid_record")


CLIENT_KINDS = (SPACE, *MEMBER_KINDS, HOST)  # what a client sends as `record`


def check_client_record(
    record: dict[str, Any], agent_id: str, where: str = "$.record", kinds: tuple[str, ...] = CLIENT_KINDS
) -> Verified:
    """Check a record a client signed: one of `kinds` (of a space), every record rule and the signature, its
    author."""
    record_hash, body, decoded = check_authored(record, agent_id, kinds, where)
    return Verified(record_hash, body, record, decoded)


def check_client_page(page: dict[str, Any], event: Verified, where: str) -> Verified:
    """Check a vouch page a client sent with its membership record `event`: a `vouch_page` of that record, in its
    space, by its author, and every record rule and the signature (its proof is checked by `resolve`, 422
    `bad_vouch_page`)."""
    if page.get("kind") != VOUCH_PAGE:
        raise InvalidInput("a page is a vouch_page record", field=f"{where}.kind", code="record_malformed")
    if page.get("event") != event.hash or page.get("space") != event.record.get("space"):
        raise InvalidInput("a page of another record (its event and space are the record's)", field=f"{where}.event",
                           code="page_not_of_event")  # fmt: skip
    return check_client_record(page, str(event.record["author_id"]), where, kinds=(VOUCH_PAGE,))


def store_txn(conn: Conn, verified: Sequence[Verified], now_ms: int, wheres: Sequence[str] = ()) -> bool:
    """Decide `verified` (records of one space, in order: each after the ones before it) and store them, scope
    local; raise the refusal of the first that is not valid (the transaction rolls back: nothing stored), located at
    its member of `wheres` (`$.record` when none). Returns whether the last one was new here."""
    new = False
    for i, item in enumerate(verified):
        space_id = store.space_of(item.record["kind"], item.hash, item.record)
        held = store.held_records(conn, space_id)
        if any(h.version == item.version for h in held):
            new = False
            continue
        candidate = spaces.Held(item.hash, item.version, item.record)
        resolved = spaces.resolve([*held, candidate], store.key_verdicts_txn(conn, [item.record["author_id"]]))
        decision = resolved.decisions[item.version]
        if decision.verdict != "valid":
            raise refusal(decision, wheres[i] if i < len(wheres) else "$.record")
        incoming = projections.Incoming(item.record, item.hash, item.decoded, stored_scope(space_id), item.body)
        projections.append_many(conn, [incoming], origin="local", now_ms=now_ms)
        new = True
    redaction_effects.redecide_txn(conn, [v.record for v in verified], now_ms)  # who moderates may have changed
    return new


class Spaces:
    """The spaces of one node: their records from clients, and what their members read of them."""

    def __init__(self, db: Database, sealing: Sealing, now_ms: Callable[[], int], node_id: str) -> None:
        self.db = db
        self.sealing = sealing
        self.now_ms = now_ms
        self.node_id = node_id  # this node's id: the host a node-kept owner's new space names

    def _sealed(self, unsigned: dict[str, Any], signer: keys.SigningKey) -> Verified:
        (record, record_hash, decoded), body = sign_and_check_body(unsigned, signer)
        return Verified(record_hash, body, record, decoded)

    async def submit(
        self, agent_id: str, record: dict[str, Any], pages: Sequence[dict[str, Any]] = ()
    ) -> SpaceSubmitted:
        """Store a record of a space its author signed (`check_client_record`, `store_txn`), and the vouch pages of
        its vouch (`check_client_page`), in one transaction: all stored or none."""
        verified = check_client_record(record, agent_id)
        self.sealing.check_clock(str(record["created_at"]), "$.record.created_at")
        space_id = store.space_of(record["kind"], verified.hash, record)
        checked = [check_client_page(page, verified, f"$.pages[{i}]") for i, page in enumerate(pages)]

        def job(conn: Conn) -> bool:
            if record["kind"] != SPACE and store.space(conn, space_id) is not None:
                self._visible(conn, space_id, agent_id)  # a non-member learns nothing of the space
            new = store_txn(conn, [verified], self.now_ms())
            store_txn(conn, checked, self.now_ms(), [f"$.pages[{i}]" for i in range(len(checked))])
            return new

        new = await self.db.write(job)
        return SpaceSubmitted(space_id=space_id, address=verified.hash, created=new)

    async def create(self, agent_id: str, name: str, description: str) -> SpaceSubmitted:
        """Create a space owned by a node-kept agent: the node signs its `space` record, and the owner's
        `space_host` record naming this node (it hosts the space implicitly; the record tells the other hosts:
        docs/spaces.md, "Which nodes host a space")."""
        signer = await self.sealing.signer(agent_id)
        unsigned: dict[str, Any] = {
            "kind": SPACE,
            "schema_version": canonical.SCHEMA_VERSION,
            "author_id": agent_id,
            "created_at": canonical.now_created_at(),
            "name": name,
            "description": description,
            "nonce": nonce(),
        }
        verified = self._sealed(unsigned, signer)
        here = self._sealed(_host_step(agent_id, verified.hash, self.node_id, "host", ()), signer)
        new = await self.db.write(lambda conn: store_txn(conn, [verified, here], self.now_ms()))
        return SpaceSubmitted(space_id=verified.hash, address=verified.hash, created=new)

    async def set_host(self, agent_id: str, space_id: str, node: str, role: str) -> SpaceSubmitted:
        """Name `node` a host of the space (`role` host) or no longer (`none`), signed by the node for the node-kept
        owner or admin `agent_id`: the next record of the node's hosting chain. No change (already so): nothing is
        signed. The creation node's implicit hosting is taken away by a chain of `host` then `none` (a chain's first
        record makes a host: docs/format-v3.md 4.6); naming it `host` makes its hosting known to the other hosts."""
        signer = await self.sealing.signer(agent_id)

        def job(conn: Conn) -> SpaceSubmitted:
            self._visible(conn, space_id, agent_id)
            resolved = store.resolve_txn(conn, space_id).spaces[space_id]
            chain = resolved.host_chains.get(node, ())
            named = node in resolved.hosts  # its chain ends in host (the creation node may host without one)
            if (role == "host" and named) or (role == "none" and node not in store.hosts(conn, space_id)):
                return SpaceSubmitted(space_id=space_id, address=None, created=False)
            made: list[Verified] = []
            if role == "none" and not chain:  # the creation node, hosting implicitly
                made.append(self._sealed(_host_step(agent_id, space_id, node, "host", chain), signer))
                chain = (made[-1].hash,)
            made.append(self._sealed(_host_step(agent_id, space_id, node, role, chain), signer))
            store_txn(conn, made, self.now_ms())
            return SpaceSubmitted(space_id=space_id, address=made[-1].hash, created=True)

        return await self.db.write(job)

    async def set_role(self, agent_id: str, space_id: str, member: str, role: str) -> SpaceSubmitted:
        """Give `member` the role `role` (admin, writer, reader, or none: a removal vouching for every post of the
        member in the space the node holds), signed by the node for the node-kept agent `agent_id`: the records of
        the member's chains that lead from its role now to `role`, each after its chain's head."""
        signer = await self.sealing.signer(agent_id)

        def job(conn: Conn) -> SpaceSubmitted:
            self._visible(conn, space_id, agent_id)
            resolved = store.resolve_txn(conn, space_id).spaces[space_id]
            made: list[Verified] = []
            for unsigned, vouched in self._steps(conn, resolved, agent_id, member, role):
                step = self._sealed(unsigned, signer)
                made += [step, *(self._sealed(page, signer) for page in _pages(step, member, vouched))]
            if not made:
                return SpaceSubmitted(space_id=space_id, address=None, created=False)
            store_txn(conn, made, self.now_ms())
            last = next(m for m in reversed(made) if m.record["kind"] in MEMBER_KINDS)
            return SpaceSubmitted(space_id=space_id, address=last.hash, created=True)

        return await self.db.write(job)

    def _steps(self, conn: Conn, resolved: spaces.Space, author: str, member: str, role: str) -> list[Step]:
        """The unsigned records that take `member` from its role in `resolved` to `role`, each with the versions
        its vouch names (a lowering's: `_step`)."""
        if member == resolved.owner:
            raise Conflict("the owner's role does not change", field="agent_id", code="owner_role_fixed")
        is_admin = resolved.role(member) == "admin"
        chain = resolved.member_chains.get(member)
        by_address = {h.address: h.record for h in store.held_records(conn, resolved.id)} if chain else {}
        member_head = by_address[chain[-1]] if chain else None
        member_role = "none" if member_head is None else str(member_head["role"])
        out: list[Step] = []
        if is_admin and role != "admin":
            out.append(self._step(conn, resolved, author, member, "space_admin", "none", "admin"))
        elif role == "admin" and not is_admin:
            out.append(self._step(conn, resolved, author, member, "space_admin", "admin", "none"))
        wanted = "none" if role == "admin" else role
        if wanted != member_role and not (wanted == "none" and member_head is None):
            out.append(self._step(conn, resolved, author, member, "space_member", wanted, member_role))
        return out

    def _step(
        self, conn: Conn, resolved: spaces.Space, author: str, member: str, kind: str, role: str, prior_role: str
    ) -> Step:
        """The next record of `member`'s chain `kind` giving it `role`; a lowering vouches for the member's posts
        held here, and comes with their versions (its pages are made of them)."""
        chains = resolved.admin_chains if kind == "space_admin" else resolved.member_chains
        chain = chains.get(member, ())
        unsigned: dict[str, Any] = {
            "kind": kind,
            "schema_version": canonical.SCHEMA_VERSION,
            "author_id": author,
            "created_at": canonical.now_created_at(),
            "space": resolved.id,
            "member": member,
            "role": role,
            "seq": len(chain) + 1,
        }
        if chain:
            unsigned["prior"] = chain[-1]
        order = spaces.CHAIN_ROLE_ORDER[kind]
        if order[role] < order[prior_role]:  # vouches for every post of the member held here, paged (`_pages`)
            versions = store.posts_of(conn, resolved.id, member)
            unsigned["vouches"] = [vouching.vouch(member, versions).as_json()]
            return unsigned, versions
        return unsigned, []

    @staticmethod
    def _visible(conn: Conn, space_id: str, agent_id: str) -> str:
        """The agent's role in the space; 404 `unknown_space` to an agent that may not read it (a non-member learns
        nothing of the space's existence)."""
        role = store.role(conn, space_id, agent_id)
        if store.space(conn, space_id) is None or not may_read(role):
            raise NotFound("no such space here", field="space_id", code="unknown_space")
        return role

    async def list_of(self, viewer: str | None) -> SpaceList:
        """The spaces the agent `viewer` has a role in; every space the node holds to its operator (`viewer` None:
        the dashboard's admin), whose role shows as `operator` (docs/spaces.md, the threat model)."""
        if viewer is None:
            rows = await self.db.read(lambda conn: [(row, OPERATOR) for row in store.every_space(conn)], quick=True)
        else:
            rows = await self.db.read(lambda conn: store.spaces_of(conn, viewer), quick=True)
        return SpaceList(spaces=[_space_out(row, role, None) for row, role in rows])

    async def show(self, viewer: str | None, space_id: str) -> SpaceOut:
        """A space and its members, to an agent that may read it, or to the node's operator (`viewer` None)."""

        def run(conn: Conn) -> SpaceOut:
            row = store.space(conn, space_id)
            if viewer is None and row is None:
                raise NotFound("no such space here", field="space_id", code="unknown_space")
            role = OPERATOR if viewer is None else self._visible(conn, space_id, viewer)
            assert row is not None  # `_visible` answered 404 for a space not held
            return _space_out(row, role, store.roles(conn, space_id), store.hosts(conn, space_id))

        return await self.db.read(run, quick=True)

    async def readable(self, agent_id: str) -> frozenset[str]:
        """The spaces `agent_id` may read: what every read path asks (`store.readable_spaces`)."""
        return await self.db.read(lambda conn: store.readable_spaces(conn, agent_id), quick=True)


def _pages(step: Verified, member: str, vouched: list[str]) -> list[dict[str, Any]]:
    """The unsigned vouch pages of a lowering the node signed (docs/format-v3.md 6.4): every page of its vouch for
    `member` (over `vouched`, sorted), in the space, signed like it; none when it vouches for no post."""
    if not vouched:
        return []
    return [
        {
            "kind": VOUCH_PAGE,
            "schema_version": canonical.SCHEMA_VERSION,
            "author_id": step.record["author_id"],
            "created_at": step.record["created_at"],
            "event": step.hash,
            "subject": member,
            "page": i,
            "versions": page_versions,
            "proof": proof,
            "space": step.record["space"],
        }
        for i in range(vouching.page_count(len(vouched)))
        for page_versions, proof in [vouching.page(vouched, i)]
    ]


def _host_step(author: str, space_id: str, node: str, role: str, chain: tuple[str, ...]) -> dict[str, Any]:
    """The unsigned next record of `node`'s hosting chain in the space (`chain`: its winning records' addresses)."""
    unsigned: dict[str, Any] = {
        "kind": HOST,
        "schema_version": canonical.SCHEMA_VERSION,
        "author_id": author,
        "created_at": canonical.now_created_at(),
        "space": space_id,
        "node": node,
        "role": role,
        "seq": len(chain) + 1,
    }
    if chain:
        unsigned["prior"] = chain[-1]
    return unsigned


def _space_out(
    row: store.SpaceRow, role: str, members: list[tuple[str, str]] | None, hosts: list[str] | None = None
) -> SpaceOut:
    return SpaceOut(
        space_id=row.space_id,
        owner=row.owner,
        name=row.name,
        description=row.description,
        created_at=row.created_at,
        role=role,
        members=None if members is None else [MemberOut(agent_id=a, role=r) for a, r in members],
        hosts=hosts,
    )
