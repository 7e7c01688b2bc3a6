"""The sync protocol's wire messages: tagged msgspec Structs, each carrying the protocol version `v`.

Records travel as `msgspec.Raw`: the canonical JSON bytes a node stores in `records.body`, byte for byte,
so the receiver verifies exactly what the author signed. See docs/sync.md for the exchange message by message.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from identity.schema import Did, Hash, whole

# 2: versions (docs/sync.md, "Versions"). 3: the record forms of docs/format-v3.md and the too_new outcome; a v3
# node also speaks v2, serving a v2 peer only v2-compatible records (sync/compat.py). A node speaks its own version
# and the one before it; a peer of any other is answered 422 unsupported_sync_version.
PROTOCOL_VERSION = 3
SYNC_VERSIONS: tuple[int, ...] = (PROTOCOL_VERSION - 1, PROTOCOL_VERSION)
MAX_CHANGES_LIMIT = 1000
DEFAULT_CHANGES_LIMIT = 500
MAX_WAIT_MS = 30_000
MAX_FETCH_HASHES = 256
# compact ids pages (decision 74): the `ids` levels, and the most characters of base64 a bodies request may carry
# (MAX_FETCH_HASHES seqs of at most 10 bytes each as LEB128 deltas)
IDS_JSON = 1
IDS_COMPACT = 2
MAX_SEQS_CHARS = 4 * ((MAX_FETCH_HASHES * 10 + 2) // 3)
# an initiator's message is at most its frame size (60,000 bytes here); a larger one only costs the responder:
# 512 KiB of skip ranges held its event loop for about 0.5 s
MAX_RECONCILE_HEX = 2 * 64 * 1024

Epoch = Annotated[str, msgspec.Meta(pattern=whole("[0-9a-f]{1,64}"))]
SpaceId = Annotated[str, msgspec.Meta(pattern=whole("[0-9a-f]{64}"))]  # a space's id: its creation's address
MAX_PEER_SPACES = 1000  # spaces one peer's operator filter may list
# spaces a reply to a round over the public federation offers (about 650 KB of ids): a longer list is a malformed
# batch, so a peer cannot make a node run a session per made-up space without bound; a responder offers at most
# this many (the first, sorted), and the initiator still reconciles every space it counts the peer a host of
MAX_OFFERED_SPACES = 10_000
# Any version decodes, so that a peer of another version is answered with the version this node speaks
# (node/federation/routes.py), and a reply of another version is reported as such (sync/client.py).
Version = Annotated[int, msgspec.Meta(ge=1, le=2**31)]
# a position in a store's log (SQLite's INTEGER range): a peer's number outside it is a malformed batch
Seq = Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]


class _Message(msgspec.Struct, tag_field="type", forbid_unknown_fields=True, kw_only=True):
    v: Version = PROTOCOL_VERSION


# ---- changes feed ---------------------------------------------------------------------------------------


class ChangesQuery(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Query of `GET /v1/sync/changes`: records after `since` in the serving node's arrival order."""

    since: Seq = 0
    epoch: Epoch | None = None
    limit: Annotated[int, msgspec.Meta(ge=1, le=MAX_CHANGES_LIMIT)] = DEFAULT_CHANGES_LIMIT
    wait_ms: Annotated[int, msgspec.Meta(ge=0, le=MAX_WAIT_MS)] = 0
    v: Version = 1  # a v1 peer did not send it
    # 1: ids first (decision 70): each item carries its seq, address, version and body size, not the body, which the
    # asker fetches by version (`POST /v1/sync/fetch`) only when it does not hold it. A node of an earlier release
    # refuses the parameter (422 validation_error, field `$.ids`): the asker then reads that peer's feed by bodies.
    # 2: compact (decision 74): the reply is an `IdsPage`, each item's seq delta, version and size packed in binary;
    # bodies are fetched by seq (`POST /v1/sync/bodies`). A node of the release before refuses 2 the same way: the
    # asker then asks it with 1
    ids: Annotated[int, msgspec.Meta(ge=0, le=IDS_COMPACT)] = 0


class ChangeItem(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """One version of the feed: its seq on the serving node, its claimed address (`hash`), its claimed version
    (SHA-256 of the body) and its canonical body. In a page asked with `ids=1`: its seq, version and the body's size
    in bytes, no body and no address (`hash` empty, left out on the wire: the fetch by version brings it)."""

    seq: Seq
    version: str
    hash: str = ""
    record: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET
    size: Annotated[int, msgspec.Meta(ge=0, le=2**31)] | msgspec.UnsetType = msgspec.UNSET

    def body(self) -> bytes:
        """The canonical body; a ValueError for an item of an ids page (it has none)."""
        if self.record is msgspec.UNSET:
            raise ValueError(f"item {self.seq} of an ids page carries no body")
        return bytes(self.record)


class Changes(_Message, tag="changes"):
    """A page of the feed. `next` is the cursor to ask with next time; `more` says another page is ready."""

    node_id: str
    epoch: str
    head: Seq
    next: Seq
    more: bool
    items: list[ChangeItem]


class Reset(_Message, tag="reset"):
    """The asked cursor does not belong to this store (other epoch) or is ahead of its head: reconcile."""

    node_id: str
    epoch: str
    head: Seq
    reason: Literal["epoch_changed", "cursor_ahead"]


ChangesReply = Changes | Reset


class IdsPage(_Message, tag="ids", omit_defaults=True, kw_only=True):
    """A page of the feed asked with `ids=2` (decision 74; docs/sync.md, "Compact ids pages"): as `Changes`, but its
    items are packed in `items`, standard base64 of, per item, the LEB128 of its seq minus the previous one (the
    first: minus the asked `since`; never 0), its 32-byte version, and the LEB128 of its body's size. It does not
    name the serving node (the asker knows whom it asked, and only a node that admitted its key answers), and
    leaves out `epoch` when it is the one the asker named, `v` when 3, `more` when false and `items` when empty."""

    epoch: str = ""
    head: Seq
    next: Seq
    more: bool = False
    items: str = ""


FeedReply = Changes | Reset | IdsPage  # what `GET /v1/sync/changes` answers, by `ids`

# ---- fetch by hash --------------------------------------------------------------------------------------


class FetchRequest(_Message, tag="fetch"):
    """Ask for records by address or by version (`POST /v1/sync/fetch`); an address brings every shared version."""

    hashes: Annotated[list[Hash], msgspec.Meta(min_length=1, max_length=MAX_FETCH_HASHES)]


class RecordItem(msgspec.Struct, forbid_unknown_fields=True):
    """A version: its address, its version and its canonical body."""

    hash: str
    version: str
    record: msgspec.Raw


class Records(_Message, tag="records"):
    """The versions found; `missing` lists the asked ids (addresses or versions) this node does not have or share."""

    node_id: str
    items: list[RecordItem]
    missing: list[str]


class BodiesRequest(_Message, tag="bodies_request", omit_defaults=True):
    """Ask for the bodies of records by their seqs on the serving node (`POST /v1/sync/bodies`), after a compact ids
    page (decision 74): `seqs` is standard base64 of the LEB128 of each seq minus the previous one (the first: minus
    0), increasing, at most `MAX_FETCH_HASHES` of them."""

    seqs: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_SEQS_CHARS)]


class Bodies(_Message, tag="bodies", omit_defaults=True):
    """The canonical bodies of the asked seqs this node has and serves the asker, in seq order, nothing else: the
    asker recomputes each one's version (and, verifying it, its address) and drops a body it did not ask for."""

    records: list[msgspec.Raw]


# ---- reconciliation -------------------------------------------------------------------------------------


# The set a reconciliation round is over (docs/sync.md, "Reconciliation round"): the public federation, or one space by
# its id. A request without it is of a node of the release before per-space rounds: the whole set served to it.
PUBLIC_SET = "public"
ReconcileSet = Annotated[str, msgspec.Meta(pattern=whole(f"{PUBLIC_SET}|[0-9a-f]{{64}}"))]


class ReconcileRequest(_Message, tag="reconcile"):
    """One negentropy message from the initiator, hex encoded (`POST /v1/sync/reconcile`), over `set` (never
    encoded when unset, so a responder of the previous release reads the request it knows)."""

    message: Annotated[str, msgspec.Meta(pattern=whole("([0-9a-f]{2})+"), max_length=MAX_RECONCILE_HEX)]
    set: ReconcileSet | msgspec.UnsetType = msgspec.UNSET


class ReconcileReply(_Message, tag="reconcile_reply"):
    """The responder's negentropy message (None when it has nothing more to say) and its store position. A reply to
    a round over the public federation also lists the spaces the responder serves the asker (`spaces`: both host
    them), so a node named a host late learns which spaces to reconcile."""

    node_id: str
    epoch: str
    head: Seq
    message: str | None
    spaces: Annotated[list[SpaceId], msgspec.Meta(max_length=MAX_OFFERED_SPACES)] | msgspec.UnsetType = msgspec.UNSET


# ---- operator surface -----------------------------------------------------------------------------------


class DigestQuery(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Query of `GET /v1/sync/digest`: `v=2` gives the digest of the v2-compatible versions only, to compare this
    node with nodes of protocol v2 (docs/format-v3.md, 8.2)."""

    v: Version = PROTOCOL_VERSION
    # one space's digest (issue 38): its records this node holds; every host of it holds the same set once in sync.
    # Without it, the public federation's (a space's records are never in it)
    space: SpaceId | None = None


class Digest(_Message, tag="digest"):
    """Count and SHA-256 over the sorted versions of this node's federated records (each version + '\\n'): a
    digest over bodies. With `v` 2, over the v2-compatible ones (sync/compat.py)."""

    node_id: str
    count: int
    sha256: str


class PeerIn(msgspec.Struct, forbid_unknown_fields=True):
    """`POST /v1/peers`: a node to pull from and to accept sync requests from."""

    url: Annotated[str, msgspec.Meta(pattern=whole("https?://[^\\s/?#]+/?"), max_length=512)]
    node_id: Did
    # the operator's filter (issue 38): serve the peer, and take from it, only these spaces' records (of those both
    # nodes host); None: every space both host. The public federation is never filtered.
    spaces: Annotated[list[SpaceId], msgspec.Meta(max_length=MAX_PEER_SPACES)] | None = None


class PeerCounters(msgspec.Struct):
    """Per-record outcomes of everything received from a peer."""

    saved: int = 0
    duplicate: int = 0
    invalid: int = 0
    pending_link: int = 0
    overflow: int = 0  # versions refused: their address already holds two that precede them (docs/sync.md)
    # refused only for being of a form a later release may define (docs/format-v3.md, 8.4): never remembered
    too_new: int = 0
    internal: int = 0  # records that failed in this node's own code (its log holds each traceback)
    waiting: int = 0  # records put in the waiting area: their key event was not held (docs/format-v3.md, 7)
    dropped_waiting: int = 0  # records a full waiting cap dropped (or that waited 24 h): reconciliation brings them
    void: int = 0  # records refused because their key may not sign for their author (docs/format-v3.md, 3.5)
    invalid_reasons: dict[str, int] = msgspec.field(default_factory=dict)


class PeerHealth(msgspec.Struct):
    """How this node's puller is faring with a peer (counts since this process started pulling from it)."""

    consecutive_failures: int = 0  # failed attempts since the last success; the backoff grows with them
    failures: int = 0  # failed attempts (network, HTTP status, malformed reply, failed fetch, store fault)
    fetch_failures: int = 0  # fetches by hash that failed (unreachable, or a reply with unrequested records)
    throttled_polls: int = 0  # polls delayed to keep the minimum interval after an early empty long-poll
    reconnect_reconciliations: int = 0  # reconciliations run at once when the peer answered again after failing
    resigned_requests: int = 0  # requests signed again because the peer had restarted (sync/auth.py)
    # the peer answers 403 unknown_peer: it has not added this node yet (not a failure; polled quietly meanwhile)
    waiting_for_peer: bool = False
    # the peer's clock minus this node's, in seconds, from the Date of its last answer (None: none yet); beyond
    # sync/auth.py's window, signed requests between the two are refused as stale (sync/auth.clock_advice)
    clock_offset_s: float | None = None


class PeerStatus(msgspec.Struct):
    """A configured peer and how far this node has pulled from it."""

    node_id: str
    url: str
    added_at: str
    cursor_epoch: str | None
    cursor_seq: int
    remote_head: int | None
    lag_records: int | None
    lag_seconds: float | None
    last_ok_at: str | None
    last_error: str | None
    last_error_at: str | None
    reconciliations: int
    last_reconcile_at: str | None
    counters: PeerCounters
    health: PeerHealth = msgspec.field(default_factory=PeerHealth)
    # the sync protocol version this node last spoke with the peer (None: not yet): 2 while the peer runs a
    # release of protocol v2 (docs/sync.md, "Versions of the protocol")
    sync_version: int | None = None
    # the lowest feed position of a record this node refused only for being too new, not yet read again
    too_new_from: int | None = None
    # the operator's filter of spaces (`bbs peer add --spaces`); None: every space both nodes host
    spaces: list[str] | None = None


class AuthorEquivocations(msgspec.Struct):
    """An author with addresses this node holds two versions of."""

    author_id: str
    equivocations: int


class PeerList(msgspec.Struct):
    peers: list[PeerStatus]
    equivocating_authors: list[AuthorEquivocations] = msgspec.field(default_factory=list)


CHANGES_DECODER = msgspec.json.Decoder(FeedReply)
BODIES_DECODER = msgspec.json.Decoder(Bodies)
RECORDS_DECODER = msgspec.json.Decoder(Records)
RECONCILE_DECODER = msgspec.json.Decoder(ReconcileReply)
