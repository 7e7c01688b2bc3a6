"""Revocation and recovery of a node-kept agent's key (`bbs agent revoke`, `bbs agent recover`, and the admin
routes `POST /v1/agents/{agent_id}/revocation` and `/recovery`), signed by the node's agent recovery key
(node/agents/recovery_file.py, docs/decisions.md record 59).

- **revoke** takes authority from the identity's current key and installs a new key the node keeps. Its vouch
  names every record of the revoked key the log holds (docs/decisions.md record 56 #7: the node computes it; the
  CLI shows the count and asks before it signs): everything else signed by that key is void on every node that
  stores the event, whatever date it claims. Signed by the recovery key when the history names the node's; when
  the history has no recovery key yet, by the current key (rank `current`, docs/format-v3.md 3.4: a thief holding
  that key ties with the owner and the smaller hash decides), setting the node's recovery key in the same event.
- **recover** builds on the event that installed the key this node keeps (the initial state for an agent never
  rotated) and installs a new key: every key event after that place, a thief's rotation included, is replaced
  (recovery outranks every other signer at that place), and every record of the keys those events installed is
  void. It vouches for the records of the kept key the log holds. It needs the node's recovery key in the state
  it builds on (`no_recovery_key` otherwise).

Both run in one write transaction through `key_events.submit_txn`, as any key event the node stores, and write
the key they take out to the key fence (node/store/key_fence.py) before the commit, as a rotation does; both refuse
(409 `signing_key_rotated_out`) on a database restored from before a rotation of the kept key, where building on
that key would void the records of the key that replaced it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from identity import key_history, keys
from node.agents import key_events, store
from node.agents import refs as agent_refs
from node.agents.service import read_key_history
from node.errors import Conflict, NotFound
from node.federation.store import store_epoch
from node.store.authority import Authority, versions_signed_by
from node.store.conn import Conn
from sync.store import Verified
from wire.api import KeyChange, KeyHistory

log = logging.getLogger("bbs.node")


@dataclass(frozen=True)
class Plan:
    """What a revocation or recovery of a node-kept agent would sign, decided in the state the log holds."""

    name: str
    agent_id: str
    event: str  # revoke | recover
    signer: keys.SigningKey
    role: str  # the signer's role in the state it builds on: recovery | current
    subject: str | None  # the key it takes authority from
    seq: int
    prior: str | None
    versions: list[str]  # the records of `subject` it vouches for
    sets_recovery: str | None  # the recovery key it sets (the state has none yet)
    replaces: int  # key events of the chain after `prior` that it replaces (recover)


def _local(conn: Conn, ref: str) -> tuple[str, str, keys.SigningKey]:
    did = agent_refs.resolve(conn, ref, "agent_id")
    row = store.local_agent(conn, did)
    if row is None:
        raise NotFound(f"no agent {ref!r} on this node", code="agent_not_found", field="agent_id")
    seed = store.key_seed(conn, did)
    if seed is None:
        raise Conflict(
            "this node does not keep that agent's key: revoke or recover it with the agent's identity file and its"
            " recovery key",
            code="key_not_kept",
        )
    return str(row["name"]), did, keys.SigningKey.from_seed(seed)


def plan_revoke(conn: Conn, authority: Authority, ref: str, recovery: keys.SigningKey, key: str | None) -> Plan:
    """The revocation of the local agent `ref`'s current key (`key`, when given, must be it). Raises 409
    `key_not_current` (another key is current), `no_signing_key` (revoked already, no key installed),
    `no_recovery_key` (the history's recovery key is not this node's and the node cannot sign otherwise)."""
    name, did, kept = _local(conn, ref)
    authority.ensure_txn(conn)
    history = authority.history(did)
    state = history.state
    if state.key is None:
        raise Conflict("the agent has no signing key to revoke: recover it", code="no_signing_key")
    if key is not None and key != state.key:
        raise Conflict(
            f"{key} is not the agent's current signing key ({state.key}); only the current key can be revoked",
            code="key_not_current",
            field="key",
        )
    if state.key != kept.did:
        raise Conflict(
            f"the agent's current key {state.key} is not the one this node keeps (another key event installed it):"
            " recover the agent instead (bbs agent recover), which replaces that event",
            code="key_not_current",
        )
    prior = history.chain[-1] if history.chain else None
    seq = len(history.chain) + 1
    versions = versions_signed_by(conn, did, state.key)
    if state.recovery == recovery.did:
        return Plan(name, did, "revoke", recovery, "recovery", state.key, seq, prior, versions, None, 0)
    if state.recovery is None and state.next is None:
        return Plan(name, did, "revoke", kept, "current", state.key, seq, prior, versions, recovery.did, 0)
    raise Conflict(
        "the agent's recovery key is not this node's and the key this node keeps cannot revoke (docs/format-v3.md 3.3)",
        code="no_recovery_key",
    )


def plan_recover(conn: Conn, authority: Authority, ref: str, recovery: keys.SigningKey) -> Plan:
    """The recovery of the local agent `ref`: a `recover` after the chain event that installed the key this node
    keeps. Raises 409 `key_not_in_history` (the kept key is no key of the chain) or `no_recovery_key`."""
    name, did, kept = _local(conn, ref)
    authority.ensure_txn(conn)
    history = authority.history(did)
    state = key_history.initial_state(did)
    place: int | None = 0 if state.key == kept.did else None
    states = [state]
    for i, address in enumerate(history.chain):
        state = key_history.apply(state, history.events[address])
        states.append(state)
        if state.key == kept.did:
            place = i + 1
    if place is None:
        raise Conflict(
            "the key this node keeps is no key of the agent's history: it cannot say where to recover from",
            code="key_not_in_history",
        )
    base = states[place]
    if base.recovery != recovery.did:
        raise Conflict(
            "the agent's history names no recovery key of this node at the key this node keeps: it cannot be"
            " recovered by this node (docs/format-v3.md 3.3)",
            code="no_recovery_key",
        )
    prior = history.chain[place - 1] if place > 0 else None
    versions = versions_signed_by(conn, did, kept.did)
    replaces = len(history.chain) - place
    return Plan(name, did, "recover", recovery, "recovery", kept.did, place + 1, prior, versions, None, replaces)


def apply_txn(
    conn: Conn, authority: Authority, plan: Plan, new: keys.SigningKey, now_ms: int
) -> tuple[Verified, KeyHistory]:
    """Sign and store the planned event installing `new`, and keep `new`'s seed in place of the old one."""
    event, pages = key_events.key_event_records(
        plan.agent_id, plan.signer, plan.event, plan.seq, plan.prior, plan.subject, plan.versions,
        key=new.did, recovery=plan.sets_recovery,
    )  # fmt: skip
    key_events.submit_txn(conn, authority, event, pages, now_ms)
    store.set_key_seed_txn(conn, plan.agent_id, new.seed)
    return event, read_key_history(conn, plan.agent_id)


_Decide = Callable[[Conn, Authority], Plan]


class Recovery:
    """Revocations and recoveries of the agents whose keys this node keeps."""

    def __init__(self, events: key_events.KeyEvents) -> None:
        self.events = events

    def _recovery_key(self) -> keys.SigningKey:
        key = self.events.recovery_key()
        if key is None:
            raise Conflict("this node has no agent recovery key file", code="no_recovery_key")
        return key

    async def revoke(self, ref: str, key: str | None = None, *, dry_run: bool = False) -> KeyChange:
        """Revoke the current key of the node-kept agent `ref` and install a new one (`plan_revoke`); with
        `dry_run` only say what it would sign (how many records it vouches for)."""
        recovery = self._recovery_key()
        return await self._run(lambda conn, cache: plan_revoke(conn, cache, ref, recovery, key), dry_run)

    async def recover(self, ref: str, *, dry_run: bool = False) -> KeyChange:
        """Recover the node-kept agent `ref` (`plan_recover`); with `dry_run` only say what it would sign."""
        recovery = self._recovery_key()
        return await self._run(lambda conn, cache: plan_recover(conn, cache, ref, recovery), dry_run)

    async def _run(self, decide: _Decide, dry_run: bool) -> KeyChange:
        authority, fence = self.events.authority, self.events.sealing.key_fence
        new = keys.SigningKey.generate()
        now_ms = self.events.now_ms()
        fenced: list[dict[str, str]] = []

        def job(conn: Conn) -> KeyChange:
            plan = decide(conn, authority)
            kept = plan.subject
            refused = None if kept is None else fence.refusal(plan.agent_id, kept)
            if refused is not None:  # a restore from before a rotation: building on its key would void later records
                raise Conflict(refused, code="signing_key_rotated_out")
            if dry_run:
                return _change(plan, None, None, read_key_history(conn, plan.agent_id))
            event, history = apply_txn(conn, authority, plan, new, now_ms)
            if kept is not None:  # the job's last step, before its commit (node/store/key_fence.py)
                # its time is the write's, not the request's: `settle` counts its minute from the entry's time
                at = self.events.now_ms()
                fenced.append(fence.record(plan.agent_id, kept, new.did, event.hash, store_epoch(conn), at))
            return _change(plan, event.hash, new.did, history)

        try:
            out = await self.events.db.write(job)
        except BaseException as exc:
            authority.invalidate()
            await key_events.put_back_unless_committed(self.events.db, fence, fenced, exc)
            raise
        if not dry_run:
            self.events.sealing.forget(out.agent_id)
            log.info("agent %s (%s): %s by key event %s, new key %s", out.name, out.agent_id, out.event_kind,
                     out.event, out.signing_key)  # fmt: skip
        if fenced:  # last: what this process holds is already the new key's if the mark's wait is cancelled
            await asyncio.to_thread(fence.committed, fenced[0])
        return out


def _change(plan: Plan, event: str | None, new: str | None, history: KeyHistory) -> KeyChange:
    return KeyChange(
        name=plan.name,
        agent_id=plan.agent_id,
        event_kind=plan.event,
        signer=plan.signer.did,
        role=plan.role,
        removed_key=plan.subject,
        vouched=len(plan.versions),
        replaced_events=plan.replaces,
        event=event,
        signing_key=new,
        key_history=history,
    )
