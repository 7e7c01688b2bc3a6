"""Posts into a space (issue 37; docs/spaces.md, "Posting into a space"): who may write there, and the rule that no
record names what its readers may not read. Run in the storing transaction, so a membership change committed just
before is seen; a refusal rolls the whole write back (nothing stored).

- **Writers only**: a post into a space the author may not read is 404 `unknown_space` (its existence is not
  revealed); one by a reader is 403 `not_a_writer` (`identity.space_rules.may_write`).
- **Links stay inside**: a record (an entry's `links`, a link record, a bus message's `dependency_ids`) may name an
  entry of its own space or a public one. Naming an entry of another space is 409 `link_across_spaces` when the
  author may read that space, and 404 (the caller's `code`, as for an entry not held) when it may not. A public
  record names no space's entry.
- **A space's links name what is held**: an entry's links and a link record of a space name only entries this node
  holds (404 `target_not_found` / `source_not_found` otherwise, or another post of the same request), so the
  verdict on a link is a function of its record and its target's, which every host of the space comes to hold
  (`crosses`; node/federation/space_gate.py decides the same on receipt, waiting for a target not held yet).
- **Named before it arrived**: a hash not held yet may be named by a public record (links resolve by hash later), so
  an entry arriving in a space whose address a record outside that space already names is refused, 409
  `named_outside_space` (its address would have been carried by records its readers may not read); its author
  retries with another `created_at`.
- **Messages go to readers**: a message of a space to an agent that may not read it is 409 `addressee_not_a_reader`.
- **Leases go to writers**: a lease on a task of a space goes to a writer of it (`check_holder_txn`), since the
  holder's release and completion are posts into the space.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, NamedTuple

from identity.schema_v3 import space_of
from identity.space_rules import may_read, may_write
from node.errors import Conflict, Forbidden, Located, NotFound
from node.redaction import store as redaction_store
from node.spaces import store
from node.spaces.sight import Sight, require_writer
from node.spaces.store import sight_of
from node.store.conn import Conn
from node.workflows.store import bus as bus_store


class Name(NamedTuple):
    """An address a record names: the JSON path that names it, the code of its 404 when the author may not read
    it, and whether it must be in the record's own space (a `supersedes` link or a retraction changes its
    target's state, so a space's entry changes no public entry's)."""

    address: str
    field: str
    missing_code: str = "target_not_found"
    same_space: bool = False
    link: bool = False  # a link's end (an entry's link, a link record's source or target): held, in a space's record


class Post(NamedTuple):
    """A record on its way in, as these checks see it: its address, author, space (None: public), the addresses
    it names (with the JSON path of each and the code of its 404 when the author may not read it), and where the
    record sits in the request."""

    address: str
    author: str
    space: str | None
    names: Sequence[Name]
    where: str


_ADDRESS = re.compile(r"[0-9a-f]{64}")


def is_address(value: str) -> bool:
    """Whether `value` may be a record's address (64 lowercase hex): a bus message's dependency that names one."""
    return bool(_ADDRESS.fullmatch(value))


def entry_post(record_hash: str, decoded: Any, where: str) -> Post:
    """The `Post` of a decoded entry record: the targets of its `links`."""
    space = space_of(decoded)
    names = [
        Name(link.target, f"$.links[{i}].target", same_space=space is not None and link.link_type == "supersedes",
             link=True)
        for i, link in enumerate(decoded.links)
    ]  # fmt: skip
    return Post(record_hash, str(decoded.author_id), space, names, where)


def link_names(record: dict[str, Any]) -> list[Name]:
    """The entries a record names by link, from its JSON (a record from a peer): an entry's link targets, a link
    record's source and target (a `supersedes` of a space: in its own space only)."""
    in_space = isinstance(record.get("space"), str)
    if record.get("kind") == "entry":
        return [
            Name(str(link["target"]), f"$.links[{i}].target",
                 same_space=in_space and link.get("link_type") == "supersedes", link=True)
            for i, link in enumerate(record.get("links") or [])
        ]  # fmt: skip
    if record.get("kind") == "link":
        state = in_space and record.get("link_type") == "supersedes"
        return [
            Name(str(record["source"]), "$.source", "source_not_found", state, link=True),
            Name(str(record["target"]), "$.target", "target_not_found", state, link=True),
        ]
    return []


def dependency_names(record: dict[str, Any]) -> list[Name]:
    """The addresses a bus message's `dependency_ids` name, from its JSON (a record from a peer): those that may be
    an address (64 hex; a dependency id need not name a record)."""
    if record.get("kind") != "message":
        return []
    deps = record.get("dependency_ids") or []
    return [
        Name(dep, f"$.dependency_ids[{i}]", "dependency_not_found")
        for i, dep in enumerate(deps)
        if isinstance(dep, str) and is_address(dep)
    ]


def record_names(record: dict[str, Any]) -> list[Name]:
    """Every address a record from a peer names by a field that follows the rule of this module: its links
    (`link_names`), a message's dependencies (`dependency_names`) and a redaction's target."""
    if record.get("kind") == "redaction":
        return [Name(str(record["target"]), "$.target")]
    return link_names(record) or dependency_names(record)


def crosses(space: str | None, named_space: str | None, same_space: bool) -> bool:
    """Whether a record of `space` (None: public) may not name an entry of `named_space`: one of another space, or a
    public one when the name changes its target's state (`same_space`: a space's supersedes link)."""
    return named_space != space and (named_space is not None or same_space)


def check_posts_txn(conn: Conn, posts: Sequence[Post]) -> None:
    """Refuse the first post that may not be stored as it is (the module's rules); nothing when all may. Reads
    nothing for a run of public posts naming nothing."""
    if not any(post.space is not None or post.names for post in posts):
        return
    sights: dict[str, Sight] = {}
    writing = [post for post in posts if post.space is not None]
    if writing:
        roles = store.roles_of(conn, {(post.space, post.author) for post in writing if post.space is not None})
        for post in writing:
            _check_writer(post, roles)
    run = {post.address: post.space for post in posts}
    named = sorted({name.address for post in posts for name in post.names if name.address not in run})
    held = store.named_records(conn, named) if named else {}
    held.update(run)
    # a record's space outlives its body (a tombstone) and is known of one refused here (docs/decisions.md 75)
    unheld = [a for a in named if a not in held]
    known: dict[str, str | None] = {}
    if unheld:
        known.update(redaction_store.redacted_spaces(conn, unheld))
        known.update(store.refused_records(conn, unheld))
    known.update(held)
    for post in posts:
        for name in post.names:
            across = name.address in known and crosses(post.space, known[name.address], name.same_space)
            if not across and name.link and post.space is not None and name.address not in held:
                with Located(post.where):  # a space's link names what is held (module docstring)
                    raise NotFound(f"no entry {name.address} here", field=name.field, code=name.missing_code)
            if across:
                sight = sights.get(post.author) or sights.setdefault(post.author, sight_of(conn, post.author))
                _refuse_across(post, name, sight.sees(known[name.address]))
    _check_not_named_outside(conn, [post for post in posts if post.space is not None], posts)


def _refuse_across(post: Post, name: Name, sees: bool) -> None:
    """Refuse `post` for naming a record outside its space: 409 `link_across_spaces` when its author `sees` that
    record's space, else 404 with the name's code, as for a record not held."""
    with Located(post.where):
        if not sees:
            raise NotFound(f"no entry {name.address} here", field=name.field, code=name.missing_code)
        raise Conflict(
            "a record may name only entries of its own space, or public ones (a supersedes link or a"
            " retraction in a space: only its own): no record names what its readers may not read",
            field=name.field,
            code="link_across_spaces",
        )


def check_addressee_txn(conn: Conn, space: str, addressee: Any, where: str) -> None:
    """Refuse a message of `space` to an agent that may not read the space (409 `addressee_not_a_reader`): it could
    never read what it is sent. `addressee` UNSET or None is a broadcast to the space's readers."""
    if not isinstance(addressee, str):
        return
    if not may_read(store.role(conn, space, addressee)):
        with Located(where):
            raise Conflict("the addressee may not read this space", field="$.to_agent", code="addressee_not_a_reader")


def check_writer_txn(conn: Conn, space: str, author: str, where: str) -> None:
    """Refuse a post into `space` by an author that may not write there (404 `unknown_space`, 403 `not_a_writer`),
    before anything of the space is read for it (a task's declaration)."""
    _check_writer(Post("", author, space, [], where), store.roles_of(conn, [(space, author)]))


def check_holder_txn(conn: Conn, space: str, agent: str) -> None:
    """Refuse a lease on a task of `space` to an agent that may not write there: 403 `not_a_writer` for a reader
    (its release and completion would be posts into the space), 404 `task_not_found` for one that may not read it
    (the task is not revealed)."""
    role = store.role(conn, space, agent)
    if not may_read(role):
        raise NotFound("no such task here", field="task_id", code="task_not_found")
    if not may_write(role):
        raise Forbidden(
            "a reader of this space may not lease its tasks: their release and completion are posts into it",
            field="task_id",
            code="not_a_writer",
        )


def _check_writer(post: Post, roles: dict[tuple[str, str], str | None]) -> None:
    """Refuse a post into a space its author may not write in (`roles`: `store.roles_of` its pairs)."""
    assert post.space is not None
    role = roles[(post.space, post.author)]
    with Located(post.where):
        require_writer(role)


def _check_not_named_outside(conn: Conn, arriving: Sequence[Post], run: Sequence[Post]) -> None:
    """Refuse an entry arriving in a space whose address a stored link, message dependency or redaction, or a post of
    this run, outside that space already names (409 `named_outside_space`)."""
    if not arriving:
        return
    by_address = {post.address: post for post in arriving}
    naming = store.naming_spaces(conn, sorted(by_address))
    naming += [(d.named, d.space) for d in bus_store.dependents_of(conn, by_address)]
    naming += [(r.target, r.space) for r in redaction_store.redactions_of(conn, by_address)]
    naming += [(name.address, post.space) for post in run for name in post.names if name.address in by_address]
    for address, space in naming:
        post = by_address[address]
        if space != post.space:
            with Located(post.where):
                raise Conflict(
                    "a record outside this space already names this entry's address: sign it again (another"
                    " created_at) to give it a new one",
                    field="$",
                    code="named_outside_space",
                )
