"""An async client for the node's REST API, typed with the node's own wire Structs.

    async with Client("http://127.0.0.1:8420", api_key=KEY) as bbs:
        entry = await bbs.post("The cache hit rate fell to 41%", tags=["perf"])

With an identity (the agent's private key, see agent.identity_file) the client builds and signs every
entry, link, bus message and task event (declare, release, complete) itself and submits `{"record": ...}`:
the node only verifies. Records are built by the functions the node uses (wire.api.unsigned_entry,
wire/unsigned.py), so they are the same whoever signs them. Lease grants stay the node's: the
task's home node is its lease authority. Without an API key such a
client authenticates by proving its key (POST /v1/auth/challenge + /v1/auth/session, node/agents/sessions.py),
so it can use any node that knows its identity.

Every post, link and message carries an idempotency key (generated when the caller gives none) that is
reused across retries, so a post retried after a dropped connection or a 5xx is stored once. Task
declarations and completions are idempotent by content: a retry resends the same body (the same signed
record), which the node applies once.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import re
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import msgspec

from agent import identity_file as identity_files
from agent import key_lifecycle
from identity import canonical, keys, records
from wire import unsigned
from wire.api import (
    MAX_BATCH,
    AckIn,
    AckOut,
    AgentListQuery,
    AgentOut,
    AgentPage,
    ChallengeIn,
    ChallengeOut,
    CreateAgent,
    CreatedAgent,
    EntryOut,
    Health,
    InboxQuery,
    InboxResult,
    KeyEventOut,
    LinkOut,
    NodeInfo,
    PostedEntries,
    PostedEntry,
    PostEntry,
    PostLink,
    Problem,
    ReadQuery,
    ReadResult,
    SearchQuery,
    SearchResult,
    SessionIn,
    SessionOut,
    SignedVersions,
    SubscriptionIn,
    SubscriptionList,
    SubscriptionOut,
    unsigned_entry,
)
from wire.feed import FeedPage, FeedQuery
from wire.time import format_ms, parse_ms
from wire.validation import split_validation_error
from wire.workflows import (
    DeclareTask,
    FinishIn,
    Graph,
    GraphQuery,
    LeaseIn,
    MessageOut,
    MessagePage,
    MessageQuery,
    PostMessage,
    ReadyList,
    ReadyQuery,
    TaskOut,
)

T = TypeVar("T")
SESSION_PURPOSE = "agent-bbs-session"
_HASH = re.compile(r"[0-9a-f]{64}")
MAX_REF_CHARS = 128  # the longest reference a node accepts: a task key (entry refs are at most 64)
RETRY_STATUSES = frozenset({500, 502, 503, 504})
WORKFLOWS = "/v1/agent-workflows"


class BBSClientError(Exception):
    """A request failed. `status` is the HTTP status (0 when the node was unreachable), `code` the problem code."""

    def __init__(self, status: int, code: str, detail: str, field: str | None = None) -> None:
        super().__init__(f"{code}: {detail}" + (f" (at {field})" if field else ""))
        self.status = status
        self.code = code
        self.detail = detail
        self.field = field


# A field inside a record the client signed: `$.record.x`, or `$.entries[i].record.x` in a batch.
_IN_RECORD = re.compile(r"^(\$(?:\.entries\[\d+\])?)\.record(?=[.\[]|$)")


def _validation(exc: msgspec.ValidationError) -> BBSClientError:
    message, path = split_validation_error(exc)
    return BBSClientError(422, "validation_error", message, path)


def _query_params(query: msgspec.Struct | None) -> list[tuple[str, str]]:
    """Encode a query Struct as repeated parameters (lists) with only the non-default values."""
    if query is None:
        return []
    defaults = type(query)()
    params: list[tuple[str, str]] = []
    for name in query.__struct_fields__:
        value = getattr(query, name)
        if value is None or value == getattr(defaults, name):
            continue
        for item in value if isinstance(value, list) else [value]:
            params.append((name, ("true" if item else "false") if isinstance(item, bool) else str(item)))
    return params


def _checked(value: T, typ: type[T]) -> T:
    """`value` validated as its wire Struct (a Struct built in code skips the wire constraints)."""
    try:
        return msgspec.convert(msgspec.to_builtins(value), typ)
    except msgspec.ValidationError as exc:
        raise _validation(exc) from None


def _in_space(space: str | None) -> list[tuple[str, str]] | None:
    """The query naming the space a task key is of (None: the public task)."""
    return None if space is None else [("space", space)]


def _path(ref: str) -> str:
    """An entry or task reference as one path segment (refused here when no node could accept it)."""
    from urllib.parse import quote

    if not 0 < len(ref) <= MAX_REF_CHARS:
        raise BBSClientError(422, "validation_error", f"a reference is 1 to {MAX_REF_CHARS} characters", "ref")
    return quote(ref, safe="")


def _task_now(task: TaskOut) -> unsigned.TaskNow:
    return unsigned.TaskNow(task.title, task.status, task.depends_on, task.checkpoint)


def _next_created_at(task: TaskOut | None) -> str:
    """Now, or just after the task's newest event, so this agent's events fold in the order it made them."""
    last = parse_ms(task.updated_at) if task is not None else None
    return format_ms(unsigned.next_event_ms(last, time.time_ns() // 1_000_000))


def _check_checkpoint_size(current: dict[str, Any], patch: dict[str, Any]) -> None:
    too_large = unsigned.checkpoint_too_large(current, patch)
    if too_large is not None:
        raise BBSClientError(422, "checkpoint_too_large", too_large, "$.checkpoint")


class Client:
    """Async REST client. Use as an async context manager, or call `close()`."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        signing_key: keys.SigningKey | None = None,
        retries: int = 4,
        backoff: float = 0.2,
        timeout: float = 30.0,
        session: aiohttp.ClientSession | None = None,
        agent_id: str | None = None,
        identity_file: Path | None = None,
        passphrase: str | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key
        self._key = signing_key
        self._agent = agent_id  # the identity's did when `signing_key` is a rotated key of it
        self._identity_path = identity_file
        self._passphrase = passphrase
        self._identity: identity_files.Identity | None = None
        self._identity_mtime = -1
        if identity_file is not None:
            self._reload_identity()
        self._retries = retries
        self._backoff = backoff
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session = session
        self._owns_session = session is None
        self._token: str | None = None
        self._token_expires = 0.0
        self._node_id: str | None = None

    @property
    def agent_id(self) -> str | None:
        """The did of the agent whose key this client holds, if any (stable across rotations)."""
        self._refresh_identity()
        if self._key is None:
            return None
        return self._agent or self._key.did

    @property
    def signing_key(self) -> str | None:
        """The did of the key this client signs with now (the identity file's current key), if any."""
        self._refresh_identity()
        return None if self._key is None else self._key.did

    def _reload_identity(self) -> None:
        assert self._identity_path is not None
        mtime = self._identity_path.stat().st_mtime_ns
        ident = identity_files.load(self._identity_path, self._passphrase)
        self._identity, self._identity_mtime = ident, mtime
        self._key, self._agent = ident.key, ident.did

    def _refresh_identity(self) -> None:
        """Re-read the identity file when another process rewrote it (its mtime changed): a rotation done there is
        signed with here from the next record on. Files are replaced atomically, so a read sees one whole file."""
        if self._identity_path is None:
            return
        try:
            changed = self._identity_path.stat().st_mtime_ns != self._identity_mtime
        except OSError:
            return  # gone for a moment (or for good): keep signing with the key read last
        if changed:
            self._reload_identity()

    def _author(self) -> str:
        """The author id of the records this client signs (it holds a key)."""
        author = self.agent_id
        assert author is not None
        return author

    @property
    def signs_records(self) -> bool:
        """True when the client signs its records (entries, links, messages, task events) itself."""
        return self._key is not None

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None and self._owns_session:
            await self._session.close()
        self._session = None

    def __repr__(self) -> str:  # never show the key or tokens
        return f"Client({self.base_url!r}, agent={self.agent_id!r})"

    # ---- transport ------------------------------------------------------------------------------------

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
            self._owns_session = True
        return self._session

    async def _bearer(self, auth: bool) -> str | None:
        if not auth:
            return None
        if self._api_key is not None:
            return self._api_key
        if self._key is None:
            return None
        if self._token is None or time.monotonic() >= self._token_expires:
            session = await self.login()
            self._token = session.token
            self._token_expires = time.monotonic() + max(session.expires_in - 60, 1)
        return self._token

    async def _request(
        self,
        method: str,
        path: str,
        typ: type[T] | None,
        *,
        json: Any = None,
        params: list[tuple[str, str]] | None = None,
        headers: Mapping[str, str] | None = None,
        auth: bool = True,
        built: bool = False,
        timeout: float | None = None,
    ) -> T:
        """One logical request: retried on connection errors and 5xx with the same body and headers.

        `built`: the body's records were signed by this client from the caller's Structs (see `_problem`);
        `timeout`: seconds for each attempt instead of the client's (a long-poll waits longer)."""
        # Only when given: aiohttp reads timeout=None as "no timeout at all", not as "the session's".
        extra: dict[str, Any] = {"timeout": aiohttp.ClientTimeout(total=timeout)} if timeout is not None else {}
        attempt, relogged = 0, False
        body = _encode_body(json) if json is not None else None
        while True:
            send = {"Content-Type": "application/json"} if body is not None else {}
            send.update(headers or {})
            token = await self._bearer(auth)
            if token is not None:
                send["Authorization"] = f"Bearer {token}"
            try:
                async with self._http().request(
                    method, self.base_url + path, data=body, params=params, headers=send, **extra
                ) as resp:
                    raw = await resp.read()
                    status = resp.status
            except (TimeoutError, aiohttp.ClientConnectionError) as exc:
                if attempt >= self._retries:
                    raise BBSClientError(0, "unreachable", f"{method} {path}: {exc!r}") from None
                attempt += 1
                await asyncio.sleep(self._backoff * 2 ** (attempt - 1))
                continue
            if status in RETRY_STATUSES and attempt < self._retries:
                attempt += 1
                await asyncio.sleep(self._backoff * 2 ** (attempt - 1))
                continue
            if status == 401 and self._api_key is None and self._token is not None and not relogged:
                self._token, relogged = None, True  # the session expired: prove the key again
                continue
            if status >= 400:
                raise self._problem(status, raw, built)
            if typ is None or status == 204:
                return None  # type: ignore[return-value]
            if typ is str:  # a text answer (the task graph as DOT or Mermaid)
                return raw.decode("utf-8", "replace")  # type: ignore[return-value]
            try:
                return msgspec.json.decode(raw, type=typ)
            except msgspec.DecodeError as exc:
                raise BBSClientError(status, "bad_response", f"unexpected response body: {exc}") from None

    async def call(
        self,
        method: str,
        path: str,
        typ: type[T] | None = None,
        *,
        json: Any = None,
        params: list[tuple[str, str]] | None = None,
        idempotency_key: str | None = None,
    ) -> T:
        """Any REST route (workflows, default mode, ...), with the same auth, retries and errors.

        Pass an `idempotency_key` for writes the route de-duplicates; it is reused across retries.
        """
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        return await self._request(method, path, typ, json=json, params=params, headers=headers)

    @staticmethod
    def _problem(status: int, raw: bytes, built: bool = False) -> BBSClientError:
        """The node's problem as an error. For records this client signed from the caller's Structs (`built`),
        a field the node names inside one (`$.record.depends_on`, `$.entries[2].record.content`) is named as in
        the Struct (`$.depends_on`, `$.entries[2].content`), so errors read alike whoever signs."""
        try:
            problem = msgspec.json.decode(raw, type=Problem)
        except msgspec.DecodeError:
            return BBSClientError(status, f"http_{status}", raw[:200].decode("utf-8", "replace"))
        field = problem.field
        if built and field is not None:
            field = _IN_RECORD.sub(r"\1", field)
        return BBSClientError(status, problem.code, problem.detail, field)

    # ---- auth -----------------------------------------------------------------------------------------

    async def login(self, key: keys.SigningKey | None = None) -> SessionOut:
        """Prove this client's key (or `key`: the identity's recovery key) to the node and get a session token
        (needs a signing key)."""
        author = self.agent_id
        if self._key is None or author is None:
            raise BBSClientError(0, "no_signing_key", "login needs the agent's private key (an identity file)")
        key = key or self._key
        challenge = await self._request(
            "POST", "/v1/auth/challenge", ChallengeOut, json=ChallengeIn(author), auth=False
        )
        message = canonical.canonical_bytes(
            {
                "purpose": SESSION_PURPOSE,
                "node_id": challenge.node_id,
                "agent_id": author,
                "challenge": challenge.challenge,
            }
        )
        named = key.did if key.did != author else None
        return await self._request(
            "POST",
            "/v1/auth/session",
            SessionOut,
            json=SessionIn(author, challenge.challenge, key.sign(message), named),
            auth=False,
        )

    # ---- entries and links ----------------------------------------------------------------------------

    async def post(self, content: str, **fields: Any) -> EntryOut:
        """Post an entry: `content` plus PostEntry fields (default entry_type finding, performative inform)."""
        fields.setdefault("entry_type", "finding")
        fields.setdefault("performative", "inform")
        try:
            entry = msgspec.convert({"content": content, **fields}, PostEntry)
        except msgspec.ValidationError as exc:
            raise _validation(exc) from None
        return await self.post_entry(entry)

    async def post_entry(self, entry: PostEntry, *, idempotency_key: str | None = None) -> EntryOut:
        """Post an entry once, whatever the retries. Signed by this client when it holds the key."""
        try:
            msgspec.convert(msgspec.to_builtins(entry), PostEntry)
        except msgspec.ValidationError as exc:
            raise _validation(exc) from None
        key = idempotency_key or entry.idempotency_key or uuid.uuid4().hex
        payload: Any
        if self._key is not None:
            payload = {"record": await self._signed_entry(entry), "idempotency_key": key}
        else:
            payload = msgspec.structs.replace(entry, idempotency_key=key)
        return await self._request(
            "POST", "/v1/entries", EntryOut, json=payload, headers={"Idempotency-Key": key}, built=True
        )

    async def post_entries(self, entries: Sequence[PostEntry]) -> list[PostedEntry]:
        """Post up to MAX_BATCH entries in one request, all or nothing (`POST /v1/entries/batch`).

        Every item gets an idempotency key (its own, or a fresh one), so retrying the call never duplicates;
        items are signed here when this client holds the key. Results come in the order given.
        """
        if not 1 <= len(entries) <= MAX_BATCH:
            raise BBSClientError(422, "validation_error", f"a batch holds 1 to {MAX_BATCH} entries", "$.entries")
        items: list[Any] = []
        for i, entry in enumerate(entries):
            try:
                msgspec.convert(msgspec.to_builtins(entry), PostEntry)
            except msgspec.ValidationError as exc:
                error = _validation(exc)
                raise BBSClientError(
                    422, error.code, error.detail, f"$.entries[{i}]{(error.field or '$')[1:]}"
                ) from None
            key = entry.idempotency_key or uuid.uuid4().hex
            if self._key is not None:
                items.append({"record": await self._signed_entry(entry), "idempotency_key": key})
            else:
                items.append(msgspec.structs.replace(entry, idempotency_key=key))
        result = await self._request("POST", "/v1/entries/batch", PostedEntries, json={"entries": items}, built=True)
        return result.results

    async def link(
        self,
        source: str,
        target: str,
        link_type: str,
        annotation: str = "",
        *,
        idempotency_key: str | None = None,
        space: str | None = None,
    ) -> LinkOut:
        """Link two entries (local ids or record hashes), once whatever the retries; in `space` when given."""
        fields = {"source": source, "target": target, "link_type": link_type, "annotation": annotation, "space": space}
        try:
            body = msgspec.convert(fields, PostLink)
        except msgspec.ValidationError as exc:
            raise _validation(exc) from None
        return await self.create_link(body, idempotency_key=idempotency_key)

    async def create_link(self, body: PostLink, *, idempotency_key: str | None = None) -> LinkOut:
        """POST /v1/links with a PostLink (signed here when this client holds the key)."""
        key = idempotency_key or body.idempotency_key or uuid.uuid4().hex
        payload: Any
        if self._key is not None:
            source = await self._record_hash(body.source, "$.source", "source_not_found")
            target = await self._record_hash(body.target, "$.target", "target_not_found")
            if source == target:
                raise BBSClientError(422, "self_link", "an entry cannot link to itself", "$.target")
            record = self._sign(
                {
                    "kind": "link",
                    "schema_version": canonical.SCHEMA_VERSION,
                    "author_id": self._author(),
                    "created_at": canonical.now_created_at(),
                    "source": source,
                    "target": target,
                    "link_type": body.link_type,
                    "annotation": canonical.normalize_value(body.annotation),
                    **({} if body.space is None else {"space": body.space}),
                }
            )
            payload = {"record": record, "idempotency_key": key}
        else:
            payload = msgspec.structs.replace(body, idempotency_key=key)
        return await self._request(
            "POST", "/v1/links", LinkOut, json=payload, headers={"Idempotency-Key": key}, built=True
        )

    def _sign(self, unsigned: dict[str, Any]) -> dict[str, Any]:
        self._refresh_identity()
        assert self._key is not None
        if self._key.did != unsigned.get("author_id"):  # a rotated key names itself (docs/format-v3.md 2)
            unsigned = {**unsigned, "signing_key": self._key.did}
        record = records.sign(unsigned, self._key)
        try:
            records.check(record, v3="signing_key" in record or "space" in record)
        except records.RecordError as exc:
            raise BBSClientError(422, f"record_{exc.reason}", str(exc), exc.field) from None
        return record

    async def _signed_entry(self, entry: PostEntry) -> dict[str, Any]:
        """Build and sign the entry record exactly as a node would (node/service.py `_sign_entry`)."""
        assert self._key is not None
        targets = [
            await self._record_hash(link.target, f"$.links[{i}].target", "target_not_found")
            for i, link in enumerate(entry.links)
        ]
        if any(not ref.startswith("did:") for ref in entry.directed_to):  # the record names addressees by did
            dids = [await self.did_of(ref, f"$.directed_to[{i}]") for i, ref in enumerate(entry.directed_to)]
            entry = msgspec.structs.replace(entry, directed_to=dids)
        try:
            unsigned = unsigned_entry(entry, self._author(), canonical.now_created_at(), targets)
        except canonical.CanonicalError as exc:
            raise BBSClientError(422, "validation_error", str(exc), exc.field) from None
        return self._sign(unsigned)

    async def did_of(self, ref: str, field: str = "agent_id") -> str:
        """The did an agent reference names: a did as it is, a local name of the node looked up (GET /v1/agents);
        an unknown name is the node's 404 `agent_not_found`, naming `field` as the node would."""
        if ref.startswith("did:"):
            return ref
        try:
            return (await self._request("GET", f"/v1/agents/{ref}", AgentOut)).agent_id
        except BBSClientError as exc:
            if exc.code != "agent_not_found":
                raise
            raise BBSClientError(exc.status, exc.code, exc.detail, field) from None

    async def _record_hash(self, ref: str, field: str, code: str) -> str:
        """A record hash for an entry reference (a hash stays as it is: it may name an entry not yet here)."""
        if _HASH.fullmatch(ref):
            return ref
        try:
            result = await self.get_entry(ref, ReadQuery(include_links=False))
        except BBSClientError as exc:
            if exc.status in (404, 422):
                raise BBSClientError(404, code, f"{ref!r} is not a known entry id or a record hash", field) from None
            raise
        return result.entries[0].record_hash

    # ---- reading --------------------------------------------------------------------------------------

    async def get_entry(self, ref: str, query: ReadQuery | None = None) -> ReadResult:
        """One entry (local id or record hash) with its neighbourhood."""

        return await self._request("GET", f"/v1/entries/{_path(ref)}", ReadResult, params=_query_params(query))

    async def read(self, refs: list[str], query: ReadQuery | None = None) -> ReadResult:
        """Entries by local ids or record hashes, with their neighbourhood (`missing` lists unknown refs)."""
        q = _checked(msgspec.structs.replace(query or ReadQuery(), ids=list(refs)), ReadQuery)
        return await self._request("GET", "/v1/entries", ReadResult, params=_query_params(q))

    async def search(self, query: SearchQuery | None = None, **fields: Any) -> SearchResult:
        """Full-text and filtered search; pass a SearchQuery or its fields as keywords."""
        if query is None:
            try:
                query = msgspec.convert(fields, SearchQuery)
            except msgspec.ValidationError as exc:
                raise _validation(exc) from None
        return await self._request("GET", "/v1/search", SearchResult, params=_query_params(query))

    async def feed(self, query: FeedQuery | None = None, **fields: Any) -> FeedPage:
        """Entries in arrival order after a cursor (`after`, the previous page's `next`), long-polling up to
        `wait_ms` for a new one; pass a FeedQuery or its fields as keywords."""
        try:
            q = _checked(query, FeedQuery) if query is not None else msgspec.convert(fields, FeedQuery)
        except msgspec.ValidationError as exc:
            raise _validation(exc) from None
        wait = q.wait_ms / 1000 + self._timeout.total if q.wait_ms and self._timeout.total else None
        return await self._request("GET", "/v1/feed", FeedPage, params=_query_params(q), timeout=wait)

    # ---- subscriptions and inbox ----------------------------------------------------------------------

    async def subscribe(self, subscription: SubscriptionIn | None = None, **fields: Any) -> SubscriptionOut:
        """Add a notification filter (the same filter twice is one subscription)."""
        if subscription is None:
            try:
                subscription = msgspec.convert(fields, SubscriptionIn)
            except msgspec.ValidationError as exc:
                raise _validation(exc) from None
        return await self._request("POST", "/v1/subscriptions", SubscriptionOut, json=subscription)

    async def subscriptions(self) -> list[SubscriptionOut]:
        return (await self._request("GET", "/v1/subscriptions", SubscriptionList)).subscriptions

    async def unsubscribe(self, subscription_id: int) -> None:
        await self._request("DELETE", f"/v1/subscriptions/{int(subscription_id)}", None)

    async def inbox(self, query: InboxQuery | None = None, **fields: Any) -> InboxResult:
        """Lease pending notifications (metadata only); acknowledge them with `ack`."""
        if query is None:
            try:
                query = msgspec.convert(fields, InboxQuery)
            except msgspec.ValidationError as exc:
                raise _validation(exc) from None
        return await self._request("GET", "/v1/inbox", InboxResult, params=_query_params(query))

    async def ack(self, notification_ids: list[int]) -> AckOut:
        """Acknowledge notifications by id; nothing to acknowledge (an empty inbox's ids) sends nothing."""
        if not notification_ids:
            return AckOut(acknowledged=0)
        return await self._request("POST", "/v1/inbox/ack", AckOut, json=AckIn(list(notification_ids)))

    # ---- the bus and the task graph (/v1/agent-workflows) ---------------------------------------------

    async def send_message(self, message: PostMessage, *, idempotency_key: str | None = None) -> MessageOut:
        """Append a message to the bus once, whatever the retries. Signed by this client when it holds the key."""
        checked = _checked(message, PostMessage)
        key = idempotency_key or checked.idempotency_key or uuid.uuid4().hex
        payload: Any = checked
        if self._key is not None:
            if checked.to_agent is not None or checked.from_agent is not None:  # a signed record names dids
                to_agent = None if checked.to_agent is None else await self.did_of(checked.to_agent, "$.to_agent")
                from_agent = (
                    None if checked.from_agent is None else await self.did_of(checked.from_agent, "$.from_agent")
                )
                checked = msgspec.structs.replace(checked, to_agent=to_agent, from_agent=from_agent)
            if checked.from_agent is not None and checked.from_agent != self._author():
                raise BBSClientError(403, "forbidden", "from_agent must be this client's agent", "$.from_agent")
            try:
                draft = unsigned.unsigned_message(self._author(), checked, canonical.now_created_at())
            except canonical.CanonicalError as exc:
                raise BBSClientError(422, "validation_error", str(exc), exc.field) from None
            payload = {"record": self._sign(draft), "idempotency_key": key}
        else:
            payload = msgspec.structs.replace(checked, idempotency_key=key)
        return await self._request(
            "POST", f"{WORKFLOWS}/messages", MessageOut, json=payload, headers={"Idempotency-Key": key}, built=True
        )

    async def messages(self, query: MessageQuery | None = None) -> MessagePage:
        """Read the bus: by project, agent (either end) or type, newest or oldest first."""
        return await self._request("GET", f"{WORKFLOWS}/messages", MessagePage, params=_query_params(query))

    async def declare_task(self, task: DeclareTask) -> TaskOut:
        """Create or update a task by key (the checkpoint is merged); nothing is appended when nothing changes.

        When this client holds the key it reads the task first and signs a declaration of exactly the fields
        that change, as the node would. Retries resend the same body, which the node applies once.
        """
        checked = _checked(task, DeclareTask)
        payload: Any = checked
        if self._key is not None:
            payload = {"record": await self._signed_declare(checked)}
        return await self._request("POST", f"{WORKFLOWS}/tasks", TaskOut, json=payload, built=True)

    async def get_task(self, ref: str, space: str | None = None) -> TaskOut:
        """One task by local id or key (a key names the task of `space`; the public one without it)."""
        return await self._request("GET", f"{WORKFLOWS}/tasks/{_path(ref)}", TaskOut, params=_in_space(space))

    async def ready_tasks(self, query: ReadyQuery | None = None) -> ReadyList:
        """The tasks that can start now: every dependency done, no live lease."""
        return await self._request("GET", f"{WORKFLOWS}/tasks/ready", ReadyList, params=_query_params(query))

    async def lease_task(self, ref: str, lease: LeaseIn | None = None, space: str | None = None) -> TaskOut:
        """Lease a task (or extend your lease). The node signs the grant: it is the task's lease authority."""
        body = _checked(lease or LeaseIn(), LeaseIn)
        path = f"{WORKFLOWS}/tasks/{_path(ref)}/lease"
        return await self._request("POST", path, TaskOut, json=body, params=_in_space(space))

    async def release_task(
        self, ref: str, finish: FinishIn | None = None, *, idempotency_key: str | None = None, space: str | None = None
    ) -> TaskOut:
        """End your lease early, optionally merging a checkpoint; the task is ready again."""
        return await self._finish("release", ref, finish, idempotency_key, space)

    async def complete_task(
        self, ref: str, finish: FinishIn | None = None, *, idempotency_key: str | None = None, space: str | None = None
    ) -> TaskOut:
        """Mark a task done (ending your lease), optionally merging a final checkpoint."""
        return await self._finish("complete", ref, finish, idempotency_key, space)

    async def task_graph(self, query: GraphQuery | None = None) -> Graph:
        """The task graph as nodes and `precedes` edges (`query.limit` nodes at most; its format is json)."""
        q = _checked(query or GraphQuery(), GraphQuery)
        return await self._request("GET", f"{WORKFLOWS}/graph", Graph, params=_query_params(q))

    async def task_graph_text(self, query: GraphQuery) -> str:
        """The task graph as the text `query.format` names: DOT or Mermaid."""
        q = _checked(query, GraphQuery)
        return await self._request("GET", f"{WORKFLOWS}/graph", str, params=_query_params(q))

    async def _finish(
        self, event: str, ref: str, finish: FinishIn | None, key: str | None = None, space: str | None = None
    ) -> TaskOut:
        body = _checked(finish or FinishIn(), FinishIn)
        if self._key is None:  # the key makes a retry after a lost answer return the task, not 409 lease_not_held
            headers = {"Idempotency-Key": key or uuid.uuid4().hex}
            path = f"{WORKFLOWS}/tasks/{_path(ref)}/{event}"
            return await self._request("POST", path, TaskOut, json=body, headers=headers, params=_in_space(space))
        task = await self.get_task(ref, space)
        fields = self._finish_fields(task, body)
        if event == "complete" and task.status in unsigned.DONE_STATUSES and not fields and task.lease is None:
            return task  # already done, nothing held, nothing to merge: the node would append nothing either
        created_at = _next_created_at(task)
        draft = unsigned.unsigned_task_event(task.key, self._author(), created_at, event, task.space, **fields)
        payload = {"record": self._sign(draft)}
        path = f"{WORKFLOWS}/tasks/{task.id}/{event}"  # its id names it in whatever space it is
        signed_headers = {"Idempotency-Key": key} if key else None  # the caller's key: its retry is answered once
        return await self._request("POST", path, TaskOut, json=payload, headers=signed_headers, built=True)

    def _finish_fields(self, task: TaskOut, body: FinishIn) -> dict[str, Any]:
        """A release's or completion's fields as the node would set them: the lease the caller names (its fencing
        token; the node refuses a release without one), and the checkpoint patch when it changes the checkpoint."""
        assert self._key is not None
        changed: dict[str, Any] = {}
        if body.checkpoint is not None:
            try:
                patch = canonical.normalize_value(body.checkpoint, "$.checkpoint")
            except canonical.CanonicalError as exc:
                raise BBSClientError(422, "validation_error", str(exc), exc.field) from None
            _check_checkpoint_size(task.checkpoint, patch)
            changed = unsigned.changed_fields({"task_key": task.key, "checkpoint": patch}, _task_now(task))
        # the fencing token is the caller's (FinishIn.lease, from its lease answer), never the task's current lease:
        # a worker whose lease expired and was granted again elsewhere must not end work it no longer owns
        return unsigned.finish_fields(changed, body.lease)

    async def _signed_declare(self, task: DeclareTask) -> dict[str, Any]:
        """Build and sign the declaration the node would build for `task` (node/workflows/service.py `declare`)."""
        assert self._key is not None
        try:
            fields = unsigned.declared_fields(task)
        except canonical.CanonicalError as exc:
            raise BBSClientError(422, "validation_error", str(exc), exc.field) from None
        try:
            current: TaskOut | None = await self.get_task(task.key, task.space)
        except BBSClientError as exc:
            if exc.code != "task_not_found":
                raise
            current = None
        changed = unsigned.changed_fields(fields, _task_now(current) if current is not None else None)
        if task.key in changed.get("depends_on", []):
            raise BBSClientError(409, "dependency_cycle", "a task cannot depend on itself", "$.depends_on")
        if "checkpoint" in fields:
            _check_checkpoint_size(current.checkpoint if current is not None else {}, fields["checkpoint"])
        created_at = _next_created_at(current)
        return self._sign(
            unsigned.unsigned_declare(task.key, self._author(), created_at, await self.node_id(), changed, task.space)
        )

    async def node_id(self) -> str:
        """The did of the node this client talks to (asked once)."""
        if self._node_id is None:
            self._node_id = (await self.node_info()).node_id
        return self._node_id

    # ---- agents and node ------------------------------------------------------------------------------

    async def promote_candidate(
        self, candidate_id: int, scope: str = "federation", *, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """Promote a default-mode candidate into an entry authored by this agent, once whatever the retries.

        When the client holds the key it fetches the candidate's draft, signs it and submits the record;
        otherwise the node signs with the key it keeps. The Idempotency-Key (the caller's, or a fresh one reused
        across retries) makes a retry answer the first promotion. Returns the promote result as JSON values.
        """
        path = f"/v1/default-mode/promote/{candidate_id}"
        body: dict[str, Any] = {"scope": scope}
        if self._key is not None:
            try:
                draft = await self.call("GET", f"/v1/default-mode/candidates/{candidate_id}/draft", dict)
            except BBSClientError as exc:
                if exc.code != "candidate_not_promotable" or idempotency_key is None:
                    raise
                # promoted already: the node answers the promotion this key made, or names the entry it became
                return await self.call("POST", path, dict, json=body, idempotency_key=idempotency_key)
            draft.pop("unlinked_evidence", None)
            draft["scope"] = scope
            if draft.get("space") is None:  # a public candidate's entry carries no space (a space's: v2)
                draft.pop("space", None)
            unsigned = {
                "kind": "entry",
                "schema_version": canonical.SCHEMA_VERSION if "space" not in draft else canonical.SPACE_SCHEMA_VERSION,
                "author_id": self._author(),
                "created_at": canonical.now_created_at(),
                **draft,
            }
            body = {"scope": scope, "record": self._sign(unsigned)}
        key = idempotency_key or uuid.uuid4().hex
        result: dict[str, Any] = await self.call("POST", path, dict, json=body, idempotency_key=key)
        return result

    async def node_info(self) -> NodeInfo:
        return await self._request("GET", "/v1/node", NodeInfo, auth=False)

    async def health(self) -> Health:
        return await self._request("GET", "/healthz", Health, auth=False)

    async def get_agent(self, agent_id: str) -> AgentOut:
        from urllib.parse import quote

        return await self._request("GET", f"/v1/agents/{quote(agent_id, safe=':')}", AgentOut)

    async def list_agents(self, query: AgentListQuery | None = None) -> AgentPage:
        """A page of the agents the node knows, in did order (admin only: the client's api_key is the admin
        token); pass the page's next_after back as `after` for the next."""
        q = _checked(query or AgentListQuery(), AgentListQuery)
        return await self._request("GET", "/v1/agents", AgentPage, params=_query_params(q))

    async def create_agent(
        self, name: str, display_name: str | None = None, description: str = "", agent_type: str | None = None
    ) -> CreatedAgent:
        """Admin only (the client's api_key must be the admin token)."""
        return await self._request(
            "POST", "/v1/agents", CreatedAgent, json=CreateAgent(name, display_name, description, agent_type)
        )

    # ---- the identity's keys (docs/format-v3.md 3; agent/key_lifecycle.py) ----------------------------------

    async def signed_versions(self, key: str) -> list[str]:
        """Every version of this agent's records the node holds signed by `key` (all pages of
        `GET /v1/agents/{id}/signed-versions`): what a rotation or revocation of that key vouches for."""
        out: list[str] = []
        after: str | None = None
        while True:
            params = [("key", key)] + ([("after", after)] if after else [])
            page = await self._request("GET", f"/v1/agents/{self._author()}/signed-versions", SignedVersions,
                                       params=params)  # fmt: skip
            out += page.versions
            if page.next_after is None:
                return out
            after = page.next_after

    async def rotate_signing_key(self, *, recovery: str | None = None) -> KeyEventOut:
        """Rotate this agent's signing key: a `rotate` event signed by the current key installs a new key, vouching
        for every record of the current key the node holds. When the history has no recovery key yet, the event
        sets one: `recovery` (a did:key), else the key beside the identity file (`NAME.id.recovery.key`, made
        now: move it offline). The identity file, when this client has one, is rewritten atomically with the new
        key and the event (another client on the file picks it up by its mtime)."""
        key = self._current_key()
        history = (await self.get_agent(self._author())).key_history
        if history is not None and history.current_key != key.did:
            raise BBSClientError(409, "key_not_current", "this client's key is not the identity's signing key")
        chain = [e for e in (history.events if history else []) if e.in_chain]
        if history is None or history.recovery is None:
            if recovery is None and self._identity_path is not None:
                recovery = key_lifecycle.recovery_key_for(self._identity_path).did
        else:
            recovery = None  # set already; only the recovery key changes it
        prior = chain[-1].address if chain else None
        return await self._key_change("rotate", key, key.did, len(chain) + 1, prior, recovery)

    async def revoke_signing_key(
        self, recovery_key: keys.SigningKey, confirm: Callable[[int], bool] | None = None
    ) -> KeyEventOut:
        """Revoke this agent's current signing key with its recovery key and install a new key: the `revoke`
        vouches for every record of the revoked key the node holds (no date: everything else that key signed is
        void on every node that stores the event). The key must be this client's (its identity file's) key: when
        another key event replaced it, `recover` instead. `confirm`, when given, is asked with the number of
        records the event vouches for before anything is signed; False stops (`BBSClientError` `not_confirmed`)."""
        key = self._current_key()
        try:
            await self._login_as(recovery_key)
            history = (await self.get_agent(self._author())).key_history
            if history is None or history.current_key != key.did:
                raise BBSClientError(
                    409, "key_not_current", "this client's key is not the identity's signing key: recover instead"
                )
            chain = [e for e in history.events if e.in_chain]
            prior = chain[-1].address if chain else None
            return await self._key_change("revoke", recovery_key, key.did, len(chain) + 1, prior, None, confirm)
        finally:
            self._token = None  # the next request proves the (new) current key

    async def recover(self, recovery_key: keys.SigningKey, confirm: Callable[[int], bool] | None = None) -> KeyEventOut:
        """Take the identity back with its recovery key: a `recover` after the last key event of the identity
        file (the one that installed the file's key) replaces every key event after it (a thief's rotation) and
        installs a new key, vouching for every record of the file's key the node holds. Needs an identity file.
        `confirm` as for `revoke_signing_key`."""
        if self._identity is None:
            raise BBSClientError(0, "no_identity_file", "recover needs the identity file (its key history)")
        self._refresh_identity()
        key = self._current_key()
        events = self._identity.key_history
        prior = records.check(events[-1], v3=True)[0] if events else None
        try:
            await self._login_as(recovery_key)
            return await self._key_change("recover", recovery_key, key.did, len(events) + 1, prior, None, confirm)
        finally:
            self._token = None  # the next request proves the (new) current key

    async def _login_as(self, key: keys.SigningKey) -> None:
        """Authenticate the next requests by `key` (the recovery key: the current key may be a thief's now),
        unless this client uses an API key. The session ends with the key event (`_key_change`)."""
        if self._api_key is None:
            session = await self.login(key)
            self._token = session.token
            self._token_expires = time.monotonic() + max(session.expires_in - 60, 1)

    def _current_key(self) -> keys.SigningKey:
        self._refresh_identity()
        if self._key is None:
            raise BBSClientError(0, "no_signing_key", "a key event needs the agent's private key (an identity file)")
        return self._key

    async def _key_change(
        self,
        kind: str,
        signer: keys.SigningKey,
        subject: str,
        seq: int,
        prior: str | None,
        recovery: str | None,
        confirm: Callable[[int], bool] | None = None,
    ) -> KeyEventOut:
        """Sign and submit a key event installing a new key; rewrite the identity file (if any) with it.

        The new identity is written first to `NAME.id.pending` (mode 0600), so the new key survives a crash
        between the node storing the event and the file being replaced; the pending file is then renamed over
        the identity file (atomic)."""
        author = self._author()
        new = keys.SigningKey.generate()
        versions = await self.signed_versions(subject)
        if confirm is not None and not confirm(len(versions)):
            raise BBSClientError(0, "not_confirmed", f"the {kind} was not confirmed: nothing was signed")
        event, pages = key_lifecycle.key_event(
            author, signer, kind, seq=seq, prior=prior, subject=subject, versions=versions, key=new.did,
            recovery=recovery,
        )  # fmt: skip
        pending: Path | None = None
        if self._identity is not None and self._identity_path is not None:
            history = self._identity.key_history if kind == "recover" else self._chain_records(prior)
            deciding = key_lifecycle.pages_deciding(self._identity.identity_record, pages)
            updated = dataclasses.replace(
                self._identity,
                key=new,
                agent_id=author,
                key_history=[*history, event],
                vouch_pages=[*self._identity.vouch_pages, *deciding],
            )
            pending = self._identity_path.with_name(self._identity_path.name + ".pending")
            identity_files.save(pending, updated, self._passphrase)
        out: KeyEventOut | None = None
        try:
            for body in key_lifecycle.requests(event, pages):
                out = await self._request("POST", f"/v1/agents/{author}/key-events", KeyEventOut, json=body)
        except BaseException:
            if pending is not None and out is None:
                pending.unlink(missing_ok=True)  # nothing stored: the old key stays the identity's
            raise
        assert out is not None
        self._token = None  # the next request proves the new key (a session of the old key would still work)
        if pending is not None and self._identity_path is not None:
            os.replace(pending, self._identity_path)
            self._reload_identity()
        else:
            self._key, self._agent = new, author
        return out

    def _chain_records(self, prior: str | None) -> list[dict[str, Any]]:
        """The identity file's key events up to `prior` (the node's chain head, which the file must hold)."""
        assert self._identity is not None
        events = self._identity.key_history
        addresses = [records.check(e, v3=True)[0] for e in events]
        if prior is None:
            return []
        if prior not in addresses:
            raise BBSClientError(409, "identity_key_outdated", "the identity file does not hold the node's key history")
        return events[: addresses.index(prior) + 1]

    async def openapi(self) -> dict[str, Any]:
        return await self._request("GET", "/openapi.json", dict, auth=False)


def _encode_body(value: Any) -> bytes:
    """A request body as JSON; a NaN or infinity anywhere is a validation error here, never a silent `null`."""
    try:
        canonical.check_finite(msgspec.to_builtins(value))
    except canonical.CanonicalError as exc:
        raise BBSClientError(422, "validation_error", str(exc), exc.field) from None
    return msgspec.json.encode(value)
