"""REST handlers for the six primitives, agents and node info. They parse and format; Node does the work."""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec
from aiohttp import web

from node.errors import Forbidden, InvalidInput
from node.store import idempotency
from node.web.appkeys import NODE, SYNC
from node.web.auth import agent_id, principal
from node.web.http import Route, convert, decode_query, idempotency_header, json_response, read_json, signed_or
from sync.auth import PeerAuthError
from wire.api import (
    AckIn,
    AckOut,
    AgentListQuery,
    AgentOut,
    AgentPage,
    CreateAgent,
    CreatedAgent,
    EntryOut,
    Health,
    InboxQuery,
    InboxResult,
    KeyChange,
    KeyEventIn,
    KeyEventOut,
    LinkOut,
    NodeInfo,
    NodeKeyState,
    PostedEntries,
    PostedEntry,
    PostEntries,
    PostEntry,
    PostLink,
    ReadQuery,
    ReadResult,
    RecoverIn,
    RevokeIn,
    RotatedKey,
    RotatedNodeKey,
    SearchQuery,
    SearchResult,
    SignedSubmission,
    SignedVersions,
    SignedVersionsQuery,
    SubscriptionIn,
    SubscriptionList,
    SubscriptionOut,
    VoidRecordPage,
    VoidRecordsQuery,
)

if TYPE_CHECKING:
    from node.service import Node


def _node(request: web.Request) -> Node:
    return request.app[NODE]


async def post_entry(request: web.Request) -> web.Response:
    body = signed_or(await read_json(request), PostEntry)
    entry, created = await _node(request).entries.post(agent_id(request), body, idempotency_header(request))
    return json_response(entry, 201 if created else 200)


async def post_entries(request: web.Request) -> web.Response:
    if idempotency.HEADER in request.headers:
        raise InvalidInput(
            "a batch takes an idempotency_key in each entry, not the Idempotency-Key header",
            field=idempotency.HEADER,
            code="idempotency_header_in_batch",
        )
    batch = convert(await read_json(request), PostEntries)
    bodies = [signed_or(item, PostEntry, f"$.entries[{i}]") for i, item in enumerate(batch.entries)]
    results = await _node(request).entries.post_batch(agent_id(request), bodies)
    posted = PostedEntries([PostedEntry(created=created, entry=entry) for entry, created in results])
    return json_response(posted, 201 if any(p.created for p in posted.results) else 200)


async def get_entry(request: web.Request) -> web.Response:
    q = decode_query(request, ReadQuery)
    if q.ids:
        raise InvalidInput("ids is for GET /v1/entries", field="$.ids")
    result = await _node(request).reads.read([request.match_info["ref"]], q, principal(request).agent_id)
    if result.missing:
        from node.errors import NotFound

        raise NotFound(f"no entry {request.match_info['ref']}", code="entry_not_found", field="ref")
    return json_response(result)


async def get_entries(request: web.Request) -> web.Response:
    q = decode_query(request, ReadQuery)
    if not q.ids:
        raise InvalidInput("give one or more ids (local ids or record hashes)", field="$.ids")
    return json_response(await _node(request).reads.read(q.ids, q, principal(request).agent_id))


async def search(request: web.Request) -> web.Response:
    q = decode_query(request, SearchQuery)
    return json_response(await _node(request).reads.search(q, principal(request).agent_id))


async def post_link(request: web.Request) -> web.Response:
    body = signed_or(await read_json(request), PostLink)
    link, created = await _node(request).links.create(agent_id(request), body, idempotency_header(request))
    return json_response(link, 201 if created else 200)


async def post_subscription(request: web.Request) -> web.Response:
    body = convert(await read_json(request), SubscriptionIn)
    sub, created = await _node(request).inbox.subscribe(agent_id(request), body)
    return json_response(sub, 201 if created else 200)


async def list_subscriptions(request: web.Request) -> web.Response:
    return json_response(SubscriptionList(await _node(request).inbox.subscriptions(agent_id(request))))


async def delete_subscription(request: web.Request) -> web.Response:
    raw = request.match_info["sub_id"]
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 18:
        raise InvalidInput("subscription id must be an integer", field="sub_id")
    await _node(request).inbox.unsubscribe(agent_id(request), int(raw))
    return web.Response(status=204)


async def get_inbox(request: web.Request) -> web.Response:
    return json_response(await _node(request).inbox.poll(agent_id(request), decode_query(request, InboxQuery)))


async def ack_inbox(request: web.Request) -> web.Response:
    body = convert(await read_json(request), AckIn)
    return json_response(await _node(request).inbox.ack(agent_id(request), body.ids))


async def node_info(request: web.Request) -> web.Response:
    info = _node(request).info()
    state = request.app[SYNC]
    if state.replay is None:
        return json_response(msgspec.structs.replace(info, boot_id=state.verifier.boot_id))
    try:  # read anew: another process may have drawn a new generation (record 86)
        boot_id: str | None = (await state.replay.current())[0]
    except PeerAuthError:  # the database is down (no signed request passes now either): the generation last read
        boot_id = state.replay.boot_id
    return json_response(msgspec.structs.replace(info, boot_id=boot_id))


async def get_agent(request: web.Request) -> web.Response:
    return json_response(await _node(request).agents.get(request.match_info["agent_id"]))


async def list_agents(request: web.Request) -> web.Response:
    return json_response(await _node(request).agents.page(decode_query(request, AgentListQuery)))


async def create_agent(request: web.Request) -> web.Response:
    body = convert(await read_json(request), CreateAgent)
    made = await _node(request).agents.create(body.name, body.display_name, body.description, body.agent_type)
    return json_response(made, 201)


async def rotate_api_key(request: web.Request) -> web.Response:
    return json_response(await _node(request).agents.rotate_api_key(request.match_info["agent_id"]), 201)


async def void_records(request: web.Request) -> web.Response:
    return json_response(await _node(request).key_events.void_records(decode_query(request, VoidRecordsQuery)))


async def post_key_event(request: web.Request) -> web.Response:
    target = (await _node(request).agents.get(request.match_info["agent_id"])).agent_id  # a did or a name; else 404
    if agent_id(request) != target:
        raise Forbidden("an agent submits only its own key events", field="agent_id")
    body = convert(await read_json(request), KeyEventIn)
    out = await _node(request).key_events.submit(target, body)
    return json_response(out, 201 if out.created or out.pages_stored else 200)


async def signed_versions(request: web.Request) -> web.Response:
    target = (await _node(request).agents.get(request.match_info["agent_id"])).agent_id
    if agent_id(request) != target:
        raise Forbidden("an agent reads only the versions of its own keys", field="agent_id")
    query = decode_query(request, SignedVersionsQuery)
    return json_response(await _node(request).key_events.signed_versions(target, query))


async def rotate_signing_key(request: web.Request) -> web.Response:
    return json_response(await _node(request).key_events.rotate(request.match_info["agent_id"]), 201)


async def revoke_signing_key(request: web.Request) -> web.Response:
    body = convert(await read_json(request), RevokeIn)
    out = await _node(request).recovery.revoke(request.match_info["agent_id"], body.key, dry_run=body.dry_run)
    return json_response(out, 200 if body.dry_run else 201)


async def recover_agent(request: web.Request) -> web.Response:
    body = convert(await read_json(request), RecoverIn)
    out = await _node(request).recovery.recover(request.match_info["agent_id"], dry_run=body.dry_run)
    return json_response(out, 200 if body.dry_run else 201)


async def rotate_node_key(request: web.Request) -> web.Response:
    return json_response(await _node(request).node_keys.rotate(), 201)


async def node_key(request: web.Request) -> web.Response:
    return json_response(_node(request).node_keys.state())


async def healthz(request: web.Request) -> web.Response:
    return json_response(Health(status="ok"))


ROUTES: list[Route] = [
    Route(
        "POST",
        "/v1/entries",
        post_entry,
        "Post an entry (node-signed fields, or a record the author signed)",
        "agent",
        body=PostEntry | SignedSubmission,
        responses={201: EntryOut, 200: EntryOut},
        idempotent=True,
    ),
    Route(
        "POST",
        "/v1/entries/batch",
        post_entries,
        "Post up to 100 entries at once, all or nothing (each item as for POST /v1/entries)",
        "agent",
        body=PostEntries,
        responses={201: PostedEntries, 200: PostedEntries},
    ),
    Route(
        "GET",
        "/v1/entries",
        get_entries,
        "Read entries by ids with their neighbourhood",
        "any",
        query=ReadQuery,
        responses={200: ReadResult},
    ),
    Route(
        "GET",
        "/v1/entries/{ref}",
        get_entry,
        "Read one entry by local id or record hash (a redacted address: 200 with its tombstone in `redacted`)",
        "any",
        query=ReadQuery,
        responses={200: ReadResult},
    ),
    Route(
        "GET",
        "/v1/search",
        search,
        "Search entries: full text, filters and graph traversal",
        "any",
        query=SearchQuery,
        responses={200: SearchResult},
    ),
    Route(
        "POST",
        "/v1/links",
        post_link,
        "Link two entries",
        "agent",
        body=PostLink | SignedSubmission,
        responses={201: LinkOut, 200: LinkOut},
        idempotent=True,
    ),
    Route(
        "POST",
        "/v1/subscriptions",
        post_subscription,
        "Subscribe to a notification filter",
        "agent",
        body=SubscriptionIn,
        responses={201: SubscriptionOut, 200: SubscriptionOut},
    ),
    Route(
        "GET",
        "/v1/subscriptions",
        list_subscriptions,
        "List your subscriptions",
        "agent",
        responses={200: SubscriptionList},
    ),
    Route(
        "DELETE",
        "/v1/subscriptions/{sub_id}",
        delete_subscription,
        "Remove one of your subscriptions",
        "agent",
        responses={204: None},
    ),
    Route(
        "GET",
        "/v1/inbox",
        get_inbox,
        "Lease your pending notifications (metadata only)",
        "agent",
        query=InboxQuery,
        responses={200: InboxResult},
    ),
    Route(
        "POST", "/v1/inbox/ack", ack_inbox, "Acknowledge notifications", "agent", body=AckIn, responses={200: AckOut}
    ),
    Route("GET", "/v1/node", node_info, "This node's id, key, versions and limits", "none", responses={200: NodeInfo}),
    Route(
        "GET",
        "/v1/agents",
        list_agents,
        "List the agents this node knows, in did order, up to 200 a page (admin)",
        "admin",
        query=AgentListQuery,
        responses={200: AgentPage},
    ),
    Route("GET", "/v1/agents/{agent_id}", get_agent, "An agent's public identity", "any", responses={200: AgentOut}),
    Route(
        "POST",
        "/v1/agents",
        create_agent,
        "Create an agent whose key this node keeps (admin)",
        "admin",
        body=CreateAgent,
        responses={201: CreatedAgent},
    ),
    Route(
        "POST",
        "/v1/agents/{agent_id}/api-key",
        rotate_api_key,
        "Replace a local agent's API keys with a new one, shown once; the old keys stop working (admin)",
        "admin",
        responses={201: CreatedAgent},
    ),
    Route(
        "POST",
        "/v1/agents/{agent_id}/key-events",
        post_key_event,
        "Submit a key event the agent signed (rotation, revocation, recovery) with vouch pages of it; decided as"
        " sync decides it, never waiting: 422 unknown_prior, unauthorized_key_event, bad_vouch_page, record_*",
        "agent",
        body=KeyEventIn,
        responses={201: KeyEventOut, 200: KeyEventOut},
    ),
    Route(
        "GET",
        "/v1/agents/{agent_id}/signed-versions",
        signed_versions,
        "The versions of the agent's records this node holds signed by one of its keys, in version order, a page"
        " at a time: what a rotation or revocation of that key vouches for (only the agent itself)",
        "agent",
        query=SignedVersionsQuery,
        responses={200: SignedVersions},
    ),
    Route(
        "POST",
        "/v1/agents/{agent_id}/signing-key",
        rotate_signing_key,
        "Rotate a node-kept agent's signing key: a new key, installed by a key event the old one signs, vouching"
        " for the old key's records (admin)",
        "admin",
        responses={201: RotatedKey},
    ),
    Route(
        "POST",
        "/v1/agents/{agent_id}/revocation",
        revoke_signing_key,
        "Revoke a node-kept agent's current signing key and install a new one, signed by the node's agent recovery"
        " key (by the current key, setting that recovery key, when the history has none: the owner then ties with a"
        " thief on rank and the smaller hash decides); vouches for every record of the key the log holds (admin)",
        "admin",
        body=RevokeIn,
        responses={201: KeyChange, 200: KeyChange},
    ),
    Route(
        "POST",
        "/v1/agents/{agent_id}/recovery",
        recover_agent,
        "Recover a node-kept agent with the node's agent recovery key: a recover event after the key this node"
        " keeps, replacing every key event after it and installing a new key (admin)",
        "admin",
        body=RecoverIn,
        responses={201: KeyChange, 200: KeyChange},
    ),
    Route(
        "POST",
        "/v1/node/key",
        rotate_node_key,
        "Rotate the node key: a new key, installed by a key event the current one signs, vouching for the node's"
        " records; sync requests are signed by it toward every peer holding the rotation (admin)",
        "admin",
        responses={201: RotatedNodeKey},
    ),
    Route(
        "GET",
        "/v1/node/key",
        node_key,
        "The keys this node signs with: the newest, the one before while a peer has not pulled its rotation, and the"
        " peers holding the newest (admin)",
        "admin",
        responses={200: NodeKeyState},
    ),
    Route(
        "GET",
        "/v1/admin/void-records",
        void_records,
        "Records stored before a later key event made them void (a revoke, a winning recover, a rotation not"
        " vouching for them), in log order, a page at a time: kept in the log, hidden from every read and peer (admin)",
        "admin",
        query=VoidRecordsQuery,
        responses={200: VoidRecordPage},
    ),
    Route("GET", "/healthz", healthz, "Liveness", "none", responses={200: Health}, tag="ops"),
]
