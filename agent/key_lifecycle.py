"""The key events an agent holding its own identity signs (docs/format-v3.md 3): a rotation by its current key,
a revocation or a recovery by its recovery key, each with the vouch pages of what it still vouches for.

Built from `identity` alone, exactly as a node checks them (the node's own builder is node/agents/key_events.py,
which the agent side may not import). The client (`agent.client.Client.rotate_signing_key`, `revoke_signing_key`,
`recover`) asks the node for the versions to vouch for (`GET /v1/agents/{id}/signed-versions`: every record of the
key the node holds, docs/decisions.md record 56 #7) and submits the result to `POST /v1/agents/{id}/key-events`.

The recovery key of an identity file `NAME.id` is the key file `NAME.id.recovery.key` beside it (mode 0600),
made at the identity's first rotation when the caller names no recovery key: the owner moves it offline. It is
the one key that can take the identity back after the signing key was copied (docs/operations.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from identity import canonical, keys, records, vouching

PAGES_PER_REQUEST = 12  # a page of 1,024 versions is about 67 KiB; a request body is at most 1 MiB
RECOVERY_SUFFIX = ".recovery.key"


def recovery_key_path(identity_path: Path) -> Path:
    """Where the recovery key of the identity file `identity_path` is written: beside it."""
    return identity_path.with_name(identity_path.name + RECOVERY_SUFFIX)


def recovery_key_for(identity_path: Path) -> keys.SigningKey:
    """The recovery key beside `identity_path`, made (mode 0600) when there is none yet."""
    path = recovery_key_path(identity_path)
    if path.exists():
        return keys.load_key(path)
    key = keys.SigningKey.generate()
    keys.save_key(path, key)
    return key


def _signed(body: dict[str, Any], signer: keys.SigningKey) -> dict[str, Any]:
    if signer.did != body["author_id"]:
        body = {**body, "signing_key": signer.did}
    return records.sign(body, signer)


def key_event(
    author: str,
    signer: keys.SigningKey,
    kind: str,
    *,
    seq: int,
    prior: str | None,
    subject: str | None,
    versions: Sequence[str],
    key: str | None,
    recovery: str | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A signed key event `kind` (rotate, revoke, recover) of `author` by `signer`, installing `key` (and setting
    `recovery` when given), whose vouch for `subject` (the key it takes authority from) names `versions`, and its
    vouch pages (signed by `signer`, as a node requires)."""
    members = vouching.sorted_versions(versions)
    vouches = [] if subject is None else [vouching.vouch(subject, members)]
    body: dict[str, Any] = {
        "kind": "key_event",
        "schema_version": canonical.SCHEMA_VERSION,
        "author_id": author,
        "created_at": canonical.now_created_at(),
        "event": kind,
        "seq": seq,
        "vouches": [v.as_json() for v in vouches],
    }
    for name, value in (("key", key), ("recovery", recovery), ("prior", prior)):
        if value is not None:
            body[name] = value
    event = _signed(body, signer)
    address = records.check(event, v3=True)[0]
    pages = []
    for i in range(vouching.page_count(len(members)) if subject is not None else 0):
        page_versions, proof = vouching.page(members, i)
        page = {
            "kind": "vouch_page",
            "schema_version": canonical.SCHEMA_VERSION,
            "author_id": author,
            "created_at": body["created_at"],
            "event": address,
            "subject": subject,
            "page": i,
            "versions": page_versions,
            "proof": proof,
        }
        pages.append(_signed(page, signer))
    return event, pages


def requests(event: dict[str, Any], pages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The bodies of `POST /v1/agents/{id}/key-events` that carry `event` and all its pages (the event again in
    each: a node stores it once and answers the later ones 201 for their pages)."""
    chunks = [pages[i : i + PAGES_PER_REQUEST] for i in range(0, len(pages), PAGES_PER_REQUEST)] or [[]]
    return [{"record": event, "pages": chunk} for chunk in chunks]
