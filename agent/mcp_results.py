"""Compact tool results: a search page as an agent needs it to decide what to read.

The seed's rule is metadata first: an agent sees who said what kind of thing, with which tags and confidence,
and spends its context on content only through `read`. A search hit is therefore the entry's metadata and a
preview of at most `PREVIEW_CHARS` characters (the search's snippet when it has words, so the preview shows
the match): under 400 characters a hit. Entries are named by id (every tool takes an id where it takes a
record hash), and a link of the page's neighbourhood names its ends by id when they are on the page (by record
hash otherwise), with its type and annotation.
"""

from __future__ import annotations

from typing import Any

from wire.api import EntryOut, LinkOut, SearchResult

PREVIEW_CHARS = 100
ELLIPSIS = "…"


def preview(text: str, limit: int = PREVIEW_CHARS) -> str:
    """`text` on one line, clipped to `limit` characters (an ellipsis marks the cut)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + ELLIPSIS


def hit(entry: EntryOut, snippet_text: str | None = None) -> dict[str, Any]:
    """One entry of a search page: its metadata first, then its preview; flags only when they are set."""
    item: dict[str, Any] = {
        "id": entry.id,
        "author_id": entry.author_id,
        "created_at": entry.created_at,
        "entry_type": entry.entry_type,
        "performative": entry.performative,
        "confidence": entry.confidence,
        "tags": entry.tags,
    }
    if entry.truth_state != "fact":
        item["truth_state"] = entry.truth_state
    for flag in ("retracted", "superseded", "equivocated"):
        if getattr(entry, flag):
            item[flag] = True
    item["preview"] = preview(snippet_text if snippet_text is not None else entry.content)
    return item


def link(edge: LinkOut, ids: dict[str, int]) -> dict[str, Any]:
    """A link of a search page's neighbourhood: its ends (ids of the page's entries, else record hashes), its
    type and annotation."""
    item: dict[str, Any] = {
        "source": ids.get(edge.source, edge.source),
        "target": ids.get(edge.target, edge.target),
        "link_type": edge.link_type,
    }
    if edge.annotation:
        item["annotation"] = edge.annotation
    if not edge.resolved:
        item["resolved"] = False
    return item


def search_page(result: SearchResult) -> dict[str, Any]:
    """A search page: paging and freshness first, then the hits (and their neighbourhood), then links."""
    page: dict[str, Any] = {
        "limit": result.limit,
        "offset": result.offset,
        "next_offset": result.next_offset,
        "truncated": result.truncated,
        "stale": result.stale,
    }
    if result.indexed_through is not None:
        page["indexed_through"] = result.indexed_through
    snippets = result.snippets
    page["entries"] = [
        hit(e, snippets[e.record_hash].text if e.record_hash in snippets else None) for e in result.entries
    ]
    if result.links:
        ids = {e.record_hash: e.id for e in result.entries}
        page["links"] = [link(edge, ids) for edge in result.links]
    return page
