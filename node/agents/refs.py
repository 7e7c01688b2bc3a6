"""One way to name an agent in any request: its did, or the local name it was registered under on this node.

Every route field that names an agent (`to_agent`, `from_agent`, `agent`, `author`, `authors`, `directed_to`,
a lease's `agent`, the `{agent_id}` of a path, a promotion's `author`) goes through `resolve` before the work
starts. Records always carry dids: a name is resolved before anything is signed or stored.
"""

from __future__ import annotations

from collections.abc import Iterable

from node.agents import store
from node.errors import InvalidInput, NotFound
from node.store.conn import Conn
from wire.api import AGENT_REF_PATTERN

DID_PREFIX = "did:key:"


def is_did(ref: str) -> bool:
    """Whether `ref` is spelled as a did (a name never contains a colon)."""
    return ref.startswith(DID_PREFIX)


def resolve(conn: Conn, ref: str, field: str) -> str:
    """The did `ref` names. A did is returned as given (it may be an agent of another node); a local name is
    looked up: 404 `agent_not_found` naming `field` if no agent here has it, 422 `invalid_agent_ref` if `ref`
    is neither a did nor a name."""
    if is_did(ref):
        if not AGENT_REF_PATTERN.fullmatch(ref):
            raise InvalidInput(f"{ref!r} is not a did:key id", field=field, code="invalid_agent_ref")
        return ref
    if not AGENT_REF_PATTERN.fullmatch(ref):
        raise InvalidInput(f"{ref!r} is neither a did nor an agent name", field=field, code="invalid_agent_ref")
    did = store.agent_id_by_name(conn, ref)
    if did is None:
        raise NotFound(f"no agent named {ref!r} on this node (give its did or a local name)", field=field,
                       code="agent_not_found")  # fmt: skip
    return did


def resolve_optional(conn: Conn, ref: str | None, field: str) -> str | None:
    """`resolve`, passing None through (an optional field left out)."""
    return None if ref is None else resolve(conn, ref, field)


def resolve_all(conn: Conn, refs: Iterable[str], field: str) -> list[str]:
    """`resolve` for each of a list, in order; an error names `field[i]`."""
    return [resolve(conn, ref, f"{field}[{i}]") for i, ref in enumerate(refs)]


def all_dids(refs: Iterable[str]) -> bool:
    """Whether nothing in `refs` needs a look-up (the common case: callers skip the database read)."""
    return all(is_did(ref) for ref in refs)
