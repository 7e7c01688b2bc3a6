"""The one exception hierarchy of the node, mapped at each edge.

HTTP maps it to RFC 9457 problem+json with a stable `code`; MCP to `isError`
tool results; the CLI to an exit code and a one-line message.
"""

from __future__ import annotations

from types import TracebackType
from typing import Literal

from sync.store import StoreUnavailable


class BBSError(Exception):
    """A domain error a client can act on. `code` is stable; `field` is a JSON path when one input is at fault."""

    status: int = 400
    code: str = "bad_request"
    title: str = "Bad request"

    def __init__(
        self,
        detail: str,
        *,
        field: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.detail = detail
        self.field = field
        if code is not None:
            self.code = code
        self.headers = headers or {}


class InvalidInput(BBSError):
    status, code, title = 422, "validation_error", "Invalid input"


class MalformedRequest(BBSError):
    status, code, title = 400, "malformed_request", "Malformed request"


class Unauthorized(BBSError):
    status, code, title = 401, "unauthorized", "Authentication required"


class Forbidden(BBSError):
    status, code, title = 403, "forbidden", "Not allowed"


class NotFound(BBSError):
    status, code, title = 404, "not_found", "Not found"


class Conflict(BBSError):
    status, code, title = 409, "conflict", "Conflict"


class RequestTimeout(BBSError):
    status, code, title = 408, "request_timeout", "Request timeout"


class ClientClosedRequest(BBSError):
    """The client closed the connection before its request arrived whole: nobody reads the answer; the status,
    nginx's 499, is for the access log and /metrics, where it must not count as a server error (5xx)."""

    status, code, title = 499, "client_closed_request", "Client closed request"


class PayloadTooLarge(BBSError):
    status, code, title = 413, "payload_too_large", "Payload too large"


class UnsupportedMediaType(BBSError):
    status, code, title = 415, "unsupported_media_type", "Unsupported media type"


class RateLimited(BBSError):
    status, code, title = 429, "rate_limited", "Too many requests"


class Unavailable(BBSError):
    status, code, title = 503, "unavailable", "Service unavailable"


class StoreMoved(Unavailable, StoreUnavailable):
    """A write into a PostgreSQL database the node moved out of (`bbs migrate-store --to sqlite`, docs/decisions.md
    record 95): every write transaction there is refused at its start, so a process left serving it (one that
    reconnected after the move) acknowledges nothing that the node's SQLite file would not hold."""

    code, title = "store_moved", "The node moved out of this database"


class NotLeader(Unavailable, StoreUnavailable):
    """A write of leader work (node/store/leader.py) from a process whose term has ended: another process took the
    lead (a new epoch) since, so the write is rolled back (docs/decisions.md record 87). A StoreUnavailable too: the
    background round that met it (its work stops with the term) is logged in one line, not as a bug; each time, as
    a run of them would be work that outlived its term."""

    repeats_quietly = False

    status, code, title = 503, "not_leader", "Not the node's leader"


class SearchIndexBuilding(Unavailable):
    """A search with words while the node's search index is being built (first start, a rebuild after a store
    restore or an analyzer change) or could not be opened: only the index answers words (node/search_index/)."""

    status, code, title = 503, "search_index_building", "Search index building"

    def __init__(self, detail: str, *, field: str | None = None, retry_after: int = 1) -> None:
        super().__init__(detail, field=field, headers={"Retry-After": str(max(1, retry_after))})


class StorageFull(BBSError):
    status, code, title = 507, "storage_full", "Insufficient storage"


class Located:
    """`with Located(where):` errors raised inside name their field under `where`, the JSON path of one item
    of a batch request (`$` leaves them as they are). A plain class: it is entered several times per post."""

    __slots__ = ("where",)

    def __init__(self, where: str) -> None:
        self.where = where

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> Literal[False]:
        where = self.where
        if isinstance(exc, BBSError) and where != "$":
            exc.field = where + exc.field[1:] if exc.field and exc.field.startswith("$") else exc.field or where
        return False


class SchemaTooNew(RuntimeError):
    """The database was written by a newer version of the software (either engine's migrations raise it; the
    store modules import it from node.store.db)."""
