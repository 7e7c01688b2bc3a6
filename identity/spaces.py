"""Spaces: each space's members and roles, and the verdict on every record of a space, decided from the records a
node holds (docs/format-v3.md, section 4; docs/decisions.md, record 62).

`resolve` takes every record of every space a node holds (records already verified on their own: signature against
the named key, the schemas of `identity.schema_v3`), as `Held` triples of address, version and record, in any order,
and a `KeyVerdicts` function that gives each record's key verdict (docs/format-v3.md, 3.5: `key_verdicts` builds it
from `identity.key_history` histories). It returns, per space, its owner, the winning chains, every agent's role
and the hosting nodes, and for every record given its `Decision`: valid, void with a stable reason, or undecided
with the dependency keys it waits for (docs/format-v3.md, 7.1). A pure function of the set of records: the
reference the node's writer must agree with.

Authority is stratified, so nothing depends on itself: (1) the space's creation (its key verdict); (2) the admin
chains, which only the owner and each admin itself sign, and the vouch pages of admin removals; (3) the member
chains and hosting chains, whose admin-signed records are decided by (2); then the vouch pages of member-chain
removals; (4) the posts (entries, links, messages, task events), decided by (2) and (3). Every chain is judged as
`identity.key_history` judges a key history: each record in the state its own `prior` leads to, the winner of a
fork by the signer's rank, then the more restrictive role, then the smaller address.

The hard cases (docs/decisions.md, record 62):

- **A record that arrives before what it depends on** is undecided, never void: the space's creation (`space:`),
  its chain's prior (`event:`), its author's addition or promotion while the author has no winning record in the
  chain(s) that would give it the role and one may still come (`member:`), its signing key (`key:`), the vouch
  pages that decide it (`pages:`). An undecided record takes no part in deciding any other: it
  is not stored (it waits), so a record nobody can ever decide (a key no event installs) cannot stall a chain.
- **Two admins changing one member at once**: a fork; both rank as admin, so the more restrictive role wins
  (a removal over a change of role), then the smaller address. The loser is void; its signer signs again.
- **The owner equivocating**: the same, among records of rank owner.
- **An admin removed while its changes travel**: its member-chain and hosting records are valid while its admin
  chain ends in `admin`, else exactly when the removal's vouch names them; a record that becomes void voids the
  records built on it in that chain, whoever signed them (the owner adds the member again).
- **A removed member who keeps writing**: once its role falls below writer, a post is valid only in the vouched
  set of the latest removal that lowered it below writer, whatever its date (a removal from the admin chain
  vouches for posts too: the two chains have no order between them, so a post either of them vouches for stands).
- **A revoked key**: a record whose key verdict is void is void (`void_key`), a membership record so voided voids
  what is built on it; one whose key verdict is undecided waits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from identity import key_history, vouching

Verdict = Literal["valid", "void", "undecided"]
Role = Literal["owner", "admin", "writer", "reader", "none"]
ROLE_RANK: dict[str, int] = {"none": 0, "reader": 1, "writer": 2, "admin": 3, "owner": 4}
POST_KINDS = frozenset({"entry", "link", "message", "task_event"})  # records that need the writer role
CHAIN_KINDS = ("space_admin", "space_member", "space_host")
SPACE_KINDS = frozenset({"space", "vouch_page", *CHAIN_KINDS, *POST_KINDS})
# A fork's winner: the signer's rank first (smaller is better), then the more restrictive role (smaller), then the
# smaller address.
SIGNER_OWNER, SIGNER_ADMIN, SIGNER_MEMBER = 0, 1, 2
CHAIN_ROLE_ORDER: dict[str, dict[str, int]] = {
    "space_admin": {"none": 0, "admin": 1},
    "space_member": {"none": 0, "reader": 1, "writer": 2},
    "space_host": {"none": 0, "host": 1},
}

KeyVerdicts = Callable[[str, dict[str, Any]], key_history.KeyVerdict]
Pages = dict[int, Sequence[str]]


class Held(NamedTuple):
    """A record as a node holds it: its address, its version (an entry's differs from its address) and its body."""

    address: str
    version: str
    record: dict[str, Any]


@dataclass(frozen=True)
class Decision:
    """The verdict on one record: `reason` says why it is void, `waits_for` the dependency keys of an undecided one."""

    verdict: Verdict
    reason: str | None = None
    waits_for: frozenset[str] = frozenset()


VALID = Decision("valid")


def void(reason: str) -> Decision:
    """A void decision with its stable reason."""
    return Decision("void", reason)


def undecided(*keys: str) -> Decision:
    """An undecided decision waiting for the given dependency keys."""
    return Decision("undecided", None, frozenset(keys))


def combine(*decisions: Decision) -> Decision:
    """All of `decisions` must hold: the first void one, else every undecided one's keys together, else valid."""
    for decision in decisions:
        if decision.verdict == "void":
            return decision
    waits = frozenset().union(*(d.waits_for for d in decisions if d.verdict == "undecided"))
    return Decision("undecided", None, waits) if waits else VALID


def first_keys_only(version: str, record: dict[str, Any]) -> key_history.KeyVerdict:
    """The key verdicts of a node that holds no key event: a record signed by its author's first key is valid,
    one naming another `signing_key` is undecided (a rotation may be on its way)."""
    return "valid" if key_history.signer_of(record) == record["author_id"] else "undecided"


def key_verdicts(
    histories: Mapping[str, key_history.History],
    pages: Mapping[tuple[str, str], Mapping[int, Sequence[str]]],
) -> KeyVerdicts:
    """Key verdicts from the key histories a node holds (`identity.key_history.resolve` per author) and the verified
    pages of their vouches; an author without a history is in its initial state (`first_keys_only`)."""

    def verdict(version: str, record: dict[str, Any]) -> key_history.KeyVerdict:
        history = histories.get(record["author_id"])
        if history is None:
            return first_keys_only(version, record)
        return key_history.key_verdict(history, key_history.signer_of(record), version, pages)

    return verdict


@dataclass(frozen=True)
class Space:
    """One space whose creation record is valid: its owner, winning chains, roles and hosting nodes."""

    id: str
    owner: str
    admin_chains: dict[str, tuple[str, ...]]  # member -> addresses of its winning admin chain, seq 1 first
    member_chains: dict[str, tuple[str, ...]]  # member -> addresses of its winning member chain
    host_chains: dict[str, tuple[str, ...]]  # node -> addresses of its winning hosting chain
    roles: dict[str, Role]  # every agent with a role above none, the owner as "owner"
    hosts: frozenset[str]  # nodes whose hosting chain ends in "host"

    def role(self, agent: str) -> Role:
        """The agent's role in the space: `none` for an agent that is not a member."""
        return self.roles.get(agent, "none")

    def may_read(self, agent: str) -> bool:
        """True if the agent may read the space's records: a reader or above (the read rule of issue 37)."""
        return ROLE_RANK[self.role(agent)] >= ROLE_RANK["reader"]


@dataclass(frozen=True)
class Spaces:
    """The outcome of `resolve`: the valid spaces, and the decision on every record given (by version)."""

    spaces: dict[str, Space]
    decisions: dict[str, Decision]
    _moderators: dict[str, Callable[[str, str], Decision]] = field(repr=False, compare=False)
    _posts: dict[str, Callable[[Held, KeyVerdicts], Decision]] = field(default_factory=dict, repr=False, compare=False)

    def verdict(self, version: str) -> Verdict:
        """The verdict on the record of `version` (one of those given to `resolve`)."""
        return self.decisions[version].verdict

    def role(self, space: str, agent: str) -> Role:
        """The agent's role in `space`: `none` when the space is not held or not valid."""
        held = self.spaces.get(space)
        return "none" if held is None else held.role(agent)

    def moderator(self, space: str, author: str, version: str) -> Decision:
        """Whether `author` holds admin authority in `space` for its record of `version` (a redaction of another's
        record, docs/format-v3.md 5.2): the owner, an admin, or a removed admin whose removal vouches for it."""
        decide = self._moderators.get(space)
        if decide is None:  # the creation is not held, or its key verdict is undecided
            return undecided(f"space:{space}")
        return decide(author, version)

    def decide_posts(self, space: str, posts: Iterable[Held], keys: KeyVerdicts) -> dict[str, Decision]:
        """The decision on each of `posts` (records of `space` of the kinds in `POST_KINDS`), by version, exactly as
        `resolve` gives it over the records this was resolved from and `posts` together, `keys` giving the posts'
        key verdicts. Sound because no decision depends on a post (posts are the last stratum), so a node may keep a
        space's resolution without its posts and decide each batch of posts against it."""
        decide = self._posts.get(space)
        if decide is None:  # the creation is not held
            return {held.version: undecided(f"space:{space}") for held in posts}
        return {held.version: decide(held, keys) for held in posts}


def resolve(records: Iterable[Held], keys: KeyVerdicts = first_keys_only) -> Spaces:
    """Every space's members and roles, and the decision on every record of a space, from the records held.

    Records of other kinds, and records of the kinds in `SPACE_KINDS` that name no space (but a space's creation),
    are ignored; a version given twice counts once. A record of a space whose creation is not held is undecided
    (`space:<id>`).
    """
    creations: dict[str, Held] = {}
    by_space: dict[str, list[Held]] = {}
    seen: set[str] = set()
    for held in records:
        if held.version in seen:  # one version is one record, however often it is given
            continue
        seen.add(held.version)
        kind = held.record.get("kind")
        if kind == "space":
            creations[held.address] = held
        elif kind in SPACE_KINDS and isinstance(held.record.get("space"), str):
            by_space.setdefault(held.record["space"], []).append(held)
    decisions: dict[str, Decision] = {}
    spaces: dict[str, Space] = {}
    moderators: dict[str, Callable[[str, str], Decision]] = {}
    posts: dict[str, Callable[[Held, KeyVerdicts], Decision]] = {}
    for space_id in sorted(set(creations) | set(by_space)):
        creation = creations.get(space_id)
        members = by_space.get(space_id, [])
        if creation is None:
            for held in members:
                decisions[held.version] = undecided(f"space:{space_id}")
            continue
        judged = _SpaceJudge(creation, members, keys)
        decisions.update(judged.decisions)
        posts[space_id] = judged.decide_post
        if judged.decisions[creation.version].verdict == "valid":
            spaces[space_id] = judged.space()
            moderators[space_id] = judged.admin_authority
        elif judged.decisions[creation.version].verdict == "void":
            moderators[space_id] = lambda author, version: void("void_space")
    return Spaces(spaces, decisions, moderators, posts)


@dataclass
class _Chain:
    """One chain judged: the winning records (seq 1 first) and the decision on every record of the chain."""

    winners: list[Held]
    decisions: dict[str, Decision]
    records: list[Held]  # every record of the chain given, whatever its decision


class _SpaceJudge:
    """Decides every record of one space whose creation record is held, stratum by stratum."""

    def __init__(self, creation: Held, members: list[Held], keys: KeyVerdicts) -> None:
        self.id = creation.address
        self.owner: str = creation.record["author_id"]
        self.keys = keys
        self.decisions: dict[str, Decision] = {creation.version: self._key(creation)}
        grouped: dict[tuple[str, str], list[Held]] = {}
        self.pages: list[Held] = []
        self.posts: list[Held] = []
        for held in members:
            kind = held.record["kind"]
            if kind in CHAIN_KINDS:
                subject = held.record["node" if kind == "space_host" else "member"]
                grouped.setdefault((kind, subject), []).append(held)
            elif kind == "vouch_page":
                self.pages.append(held)
            else:
                self.posts.append(held)
        self.admin: dict[str, _Chain] = {}
        self.member: dict[str, _Chain] = {}
        self.host: dict[str, _Chain] = {}
        self.page_sets: dict[tuple[str, str], Pages] = {}
        creation_ok = self.decisions[creation.version]
        self.failed: Decision | None = None  # the decision on every record of a space whose creation is not valid
        if creation_ok.verdict != "valid":
            self.failed = void("void_space") if creation_ok.verdict == "void" else undecided(f"space:{self.id}")
            for held in members:
                self.decisions[held.version] = self.failed
            return
        self._judge_chains(grouped, "space_admin", self.admin, self._judge_admin)
        self._judge_pages(("space_admin",))
        self._judge_chains(grouped, "space_member", self.member, self._judge_member)
        self._judge_chains(grouped, "space_host", self.host, self._judge_host)
        self._judge_pages(CHAIN_KINDS)
        for held in self.posts:
            self.decisions[held.version] = self.decide_post(held, keys)

    def decide_post(self, held: Held, keys: KeyVerdicts) -> Decision:
        """A post (stratum 4), its key verdict given by `keys`: decided by the chains and pages alone."""
        if self.failed is not None:
            return self.failed
        return combine(_key_decision(keys, held), self.write_authority(held))

    # ---- the pieces every rule uses ------------------------------------------------------------------------------

    def _key(self, held: Held) -> Decision:
        return _key_decision(self.keys, held)

    def _head_role(self, chains: Mapping[str, _Chain], agent: str) -> str:
        chain = chains.get(agent)
        return chain.winners[-1].record["role"] if chain is not None and chain.winners else "none"

    def _vouched(self, removal: Held, subject: str, version: str) -> Decision:
        pages = self.page_sets.get((removal.address, subject), {})
        answer = vouching.decide(version, removal.record, subject, pages)
        if answer == "vouched":
            return VALID
        if answer == "void":
            return void("unvouched")
        return undecided(f"pages:{removal.address}:{subject}")

    def _pending(self, agent: str, *chains: Mapping[str, _Chain]) -> bool:
        """True if `agent` has no winning record in any of `chains` and one may still come: none is held, or one
        held is undecided. (An agent whose chains hold only void records is decided: it has no role.)"""
        held = [chain for by_agent in chains if (chain := by_agent.get(agent)) is not None]
        if any(chain.winners for chain in held):
            return False
        return not held or any(d.verdict == "undecided" for chain in held for d in chain.decisions.values())

    def admin_authority(self, author: str, version: str) -> Decision:
        """Admin authority of `author` for its record of `version`: the owner; an agent whose admin chain ends in
        `admin`; a removed admin for what its latest removal vouches for. An agent with no admin chain waits for
        one while one may come (`_pending`: its promotion may not have arrived)."""
        if author == self.owner:
            return VALID
        chain = self.admin.get(author)
        if chain is not None and chain.winners:
            head = chain.winners[-1]
            return VALID if head.record["role"] == "admin" else self._vouched(head, author, version)
        if self._pending(author, self.admin):
            return undecided(f"member:{self.id}:{author}")
        return void("not_an_admin")

    def write_authority(self, held: Held) -> Decision:
        """Writer authority of a post's author: the owner, an admin, a writer; else the post must be in the vouched
        set of the latest removal that took the writer role away (in the member chain: the latest record lowering
        it below writer; in the admin chain: the latest removal), either one's vouch sufficing."""
        author = held.record["author_id"]
        if author == self.owner or self.role_of(author) in ("admin", "writer"):
            return VALID
        removals = [r for r in (_last_lowering(self.member.get(author)), _last_lowering(self.admin.get(author))) if r]
        answers = [self._vouched(removal, author, held.version) for removal in removals]
        if any(answer.verdict == "valid" for answer in answers):
            return VALID
        if self._pending(author, self.member, self.admin):
            return undecided(f"member:{self.id}:{author}")
        if not removals:
            return void("not_a_writer" if self.role_of(author) == "reader" else "not_a_member")
        return combine(*answers)

    def role_of(self, agent: str) -> Role:
        """The agent's role: owner, admin when its admin chain ends so, else its member chain's last role."""
        if agent == self.owner:
            return "owner"
        if self._head_role(self.admin, agent) == "admin":
            return "admin"
        role = self._head_role(self.member, agent)
        return "writer" if role == "writer" else "reader" if role == "reader" else "none"

    # ---- chains --------------------------------------------------------------------------------------------------

    def _judge_chains(
        self,
        grouped: Mapping[tuple[str, str], list[Held]],
        kind: str,
        into: dict[str, _Chain],
        judge: Callable[[Held, str], tuple[Decision, int]],
    ) -> None:
        for (group_kind, subject), items in sorted(grouped.items(), key=lambda item: item[0]):
            if group_kind != kind:
                continue
            chain = _judge_chain(items, CHAIN_ROLE_ORDER[kind], judge)
            into[subject] = chain
            self.decisions.update(chain.decisions)

    def _structure(self, held: Held, prior_role: str) -> Decision:
        """What a membership record must be in its place: never about the owner, a vouch exactly on a lowering."""
        record = held.record
        if record["member"] == self.owner:
            return void("unauthorized_membership")
        order = CHAIN_ROLE_ORDER[record["kind"]]
        lowers = order[record["role"]] < order.get(prior_role, 0)
        has_vouch = bool(record.get("vouches"))
        if lowers and not has_vouch:
            return void("missing_vouch")
        if has_vouch and not lowers:
            return void("unexpected_vouch")
        return VALID

    def _judge_admin(self, held: Held, prior_role: str) -> tuple[Decision, int]:
        """An admin-chain record: signed by the owner, or by the admin itself removing itself."""
        record = held.record
        author = record["author_id"]
        if author == self.owner:
            rank, authority = SIGNER_OWNER, VALID
        elif author == record["member"] and record["role"] == "none" and prior_role == "admin":
            rank, authority = SIGNER_MEMBER, VALID
        else:
            rank, authority = SIGNER_MEMBER, void("unauthorized_membership")
        return combine(self._structure(held, prior_role), authority, self._key(held)), rank

    def _judge_member(self, held: Held, prior_role: str) -> tuple[Decision, int]:
        """A member-chain record: by the owner, by an admin (4.3), or by the member lowering itself to none."""
        record = held.record
        author = record["author_id"]
        if author == self.owner:
            rank, authority = SIGNER_OWNER, VALID
        else:
            rank, authority = SIGNER_ADMIN, _as_membership(self.admin_authority(author, held.version))
            leaving = author == record["member"] and record["role"] == "none" and prior_role != "none"
            if authority.verdict != "valid" and leaving:
                rank, authority = SIGNER_MEMBER, VALID
        return combine(self._structure(held, prior_role), authority, self._key(held)), rank

    def _judge_host(self, held: Held, prior_role: str) -> tuple[Decision, int]:
        """A hosting record: by the owner or an admin; it takes authority from no author, so it carries no vouch."""
        author = held.record["author_id"]
        if author == self.owner:
            return self._key(held), SIGNER_OWNER
        return combine(_as_membership(self.admin_authority(author, held.version)), self._key(held)), SIGNER_ADMIN

    # ---- vouch pages ---------------------------------------------------------------------------------------------

    def _judge_pages(self, event_kinds: Sequence[str]) -> None:
        """Decide the vouch pages of this space whose event is a record of one of `event_kinds`; the last call
        (every chain kind) also decides the pages whose event is not held (they wait for it)."""
        events = {
            held.address: (held, self.decisions[held.version])
            for chains in (self.admin, self.member, self.host)
            for chain in chains.values()
            for held in chain.records
            if held.record["kind"] in event_kinds
        }
        for page in self.pages:
            if page.version in self.decisions:
                continue
            event = events.get(page.record["event"])
            if event is None:
                if len(event_kinds) == len(CHAIN_KINDS):
                    self.decisions[page.version] = undecided(f"event:{page.record['event']}")
                continue
            decision = _page_decision(page, *event)
            self.decisions[page.version] = decision
            if decision.verdict == "valid":
                key = (page.record["event"], page.record["subject"])
                self.page_sets.setdefault(key, {})[page.record["page"]] = page.record["versions"]

    def space(self) -> Space:
        """The space as resolved: chains, roles and hosts."""
        agents = set(self.admin) | set(self.member)
        roles: dict[str, Role] = {self.owner: "owner"}
        for agent in sorted(agents):
            role = self.role_of(agent)
            if role != "none":
                roles[agent] = role
        return Space(
            id=self.id,
            owner=self.owner,
            admin_chains={a: tuple(h.address for h in c.winners) for a, c in self.admin.items() if c.winners},
            member_chains={a: tuple(h.address for h in c.winners) for a, c in self.member.items() if c.winners},
            host_chains={n: tuple(h.address for h in c.winners) for n, c in self.host.items() if c.winners},
            roles=roles,
            hosts=frozenset(n for n in self.host if self._head_role(self.host, n) == "host"),
        )


def _key_decision(keys: KeyVerdicts, held: Held) -> Decision:
    """A record's key verdict as a decision: void `void_key`, or waiting for the key (`key:<author>:<key>`)."""
    verdict = keys(held.version, held.record)
    if verdict == "valid":
        return VALID
    if verdict == "void":
        return void("void_key")
    return undecided(f"key:{held.record['author_id']}:{key_history.signer_of(held.record)}")


def _as_membership(authority: Decision) -> Decision:
    """Admin authority as a membership rule: an agent that is no admin signs no membership (4.3)."""
    return void("unauthorized_membership") if authority.reason == "not_an_admin" else authority


def _last_lowering(chain: _Chain | None) -> Held | None:
    """The latest record of a winning chain that took the writer role away: a member-chain record lowering the
    role from writer, or an admin-chain removal."""
    if chain is None:
        return None
    prior = "none"
    found: Held | None = None
    for held in chain.winners:
        role = held.record["role"]
        if held.record["kind"] == "space_admin":
            if role == "none":
                found = held
        elif prior == "writer" and role != "writer":
            found = held
        prior = role
    return found


def _page_decision(page: Held, event: Held, event_decision: Decision) -> Decision:
    """A vouch page of a membership record: valid when its event is valid and carries a vouch for the page's subject,
    the page is signed by the event's signer and its proof verifies against that vouch (docs/format-v3.md, 6.4)."""
    if event_decision.verdict == "undecided":
        return undecided(f"event:{event.address}")
    if event_decision.verdict == "void":
        return void("event_void")
    record = page.record
    same_signer = (record["author_id"], record.get("signing_key")) == (
        event.record["author_id"],
        event.record.get("signing_key"),
    )
    vouch = vouching.vouch_for(event.record, record["subject"])
    if not same_signer or vouch is None:
        return void("bad_vouch_page")
    if not vouching.verify_page(vouch, record["page"], record["versions"], record["proof"]):
        return void("bad_vouch_page")
    return VALID


def _judge_chain(
    items: Sequence[Held], order: Mapping[str, int], judge: Callable[[Held, str], tuple[Decision, int]]
) -> _Chain:
    """Judge one chain (one kind, space and member or node) as a tree of `prior` links from seq 1.

    Each record is judged in its place: the role of its prior (`none` for seq 1) and `judge`'s rule. Among the valid
    records of one place the winner has the best (signer rank, role in `order`, address); the others lose (void,
    `losing_branch`), and so does everything built on them. What is built on a void record is void (`prior_void`),
    on an undecided one undecided (`event:<prior>`); a record whose prior is not held waits for it.
    """
    tree = _Tree(items)
    winners: list[Held] = []
    parent: Held | None = None
    while True:
        ranked = tree.judge_place(parent, judge)
        if not ranked:
            break
        ranked.sort(key=lambda held: (tree.ranks[held.version], order[held.record["role"]], held.address))
        for loser in ranked[1:]:
            tree.decisions[loser.version] = void("losing_branch")
            tree.settle_below(loser.address, lambda _: void("losing_branch"))
        parent = ranked[0]
        winners.append(parent)
    for held in items:  # not reachable from seq 1: some prior on the way is not held
        if held.version not in tree.decisions:
            tree.decisions[held.version] = undecided(f"event:{held.record['prior']}")
    return _Chain(winners, tree.decisions, list(items))


class _Tree:
    """The records of one chain by prior, and the decisions made so far."""

    def __init__(self, items: Sequence[Held]) -> None:
        self.children: dict[str | None, list[Held]] = {}
        for held in items:
            self.children.setdefault(held.record.get("prior"), []).append(held)
        self.decisions: dict[str, Decision] = {}
        self.ranks: dict[str, int] = {}

    def settle_below(self, address: str, decision_of: Callable[[Held], Decision]) -> None:
        """Decide every record built on the record at `address` (at any depth) by `decision_of`."""
        stack = [address]
        while stack:
            for child in self.children.get(stack.pop(), []):
                if child.version not in self.decisions:
                    self.decisions[child.version] = decision_of(child)
                    stack.append(child.address)

    def judge_place(self, parent: Held | None, judge: Callable[[Held, str], tuple[Decision, int]]) -> list[Held]:
        """Judge the records that follow `parent` (seq 1 when None); return the valid ones."""
        parent_seq = 0 if parent is None else parent.record["seq"]
        parent_role = "none" if parent is None else parent.record["role"]
        valid: list[Held] = []
        for held in self.children.get(None if parent is None else parent.address, []):
            if held.record["seq"] != parent_seq + 1:
                decision = void("bad_seq")
            else:
                decision, self.ranks[held.version] = judge(held, parent_role)
            self.decisions[held.version] = decision
            if decision.verdict == "valid":
                valid.append(held)
            elif decision.verdict == "void":
                self.settle_below(held.address, lambda _: void("prior_void"))
            else:
                self.settle_below(held.address, lambda child: undecided(f"event:{child.record['prior']}"))
        return valid
