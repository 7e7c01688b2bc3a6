"""Peer-signed requests: the calling peer node's id, and the body exactly as it was signed.

Used by every route a federation peer calls with a signature (node/federation/routes.py's sync endpoints, the
forwarded lease of node/workflows/routes.py); the node's peers and verifier come from the app's SyncState.
"""

from __future__ import annotations

from aiohttp import web

from node.errors import BBSError, MalformedRequest, UnsupportedMediaType
from node.web.appkeys import SYNC
from sync.auth import PeerAuthError


class PeerAuthFailed(BBSError):
    status, code, title = 401, "peer_auth_failed", "Peer authentication failed"


async def authenticate_peer(request: web.Request, body: bytes | None) -> str:
    """The calling peer's node id; refuses unsigned, unknown-key, stale and replayed requests, and those signed by
    a key the peer's key history held here does not make its current one (401 `rotated_node_key`: rotated out;
    401 `unknown_node_key`: no held key event installs it; docs/sync.md, "Node key rotation")."""
    state = request.app[SYNC]
    allowed = await state.store.peer_ids()
    try:
        url = str(request.url)  # what the peer signed: built from the Host header, which may not parse
    except (ValueError, UnicodeError):
        raise MalformedRequest(
            "the Host header is not a valid host[:port]", code="invalid_host", field="Host"
        ) from None
    try:
        if state.replay is None:  # one process (SQLite): the nonces in its memory, its own boot id
            peer, signing_key = state.verifier.verify_signed(request.method, url, request.headers, body, allowed)
        else:  # any number of processes (PostgreSQL): decided once for the node (node_replay.py, record 86)
            signed = state.verifier.check(request.method, url, request.headers, body, allowed)
            await state.replay.admit(signed)
            peer, signing_key = signed.peer, signed.signing_key
            if signed.boot is None:
                state.verifier.legacy += 1
    except PeerAuthError as exc:
        err = PeerAuthFailed(exc.detail, code=exc.code, field="Signature")
        err.status = exc.status
        if exc.status == 403:
            err.title = "Not a peer"
        raise err from None
    verdict = await state.store.node_key_verdict(peer, signing_key)
    if verdict == "void":  # the peer rotated this key out: it signs with its newest key toward a node that has it
        raise PeerAuthFailed(
            f"key {signing_key} was rotated out of {peer}'s key history held here: sign with its current key",
            code="rotated_node_key",
            field="Signature",
        )
    if verdict == "undecided":  # its rotation has not reached this node: the peer signs with the key before
        raise PeerAuthFailed(
            f"no key event of {peer} held here installs {signing_key}: sign with the key before (this node has not"
            " pulled the rotation yet)",
            code="unknown_node_key",
            field="Signature",
        )
    return peer


async def signed_body(request: web.Request) -> bytes:
    """The raw JSON body of a peer-signed request (the signature covers these bytes, not a re-encoding)."""
    if request.content_type != "application/json":
        raise UnsupportedMediaType("send the body as application/json", field="Content-Type")
    return await request.read()
