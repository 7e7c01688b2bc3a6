"""How the people's commands (`bbs post`, `search`, `message`, `task`, ...) show what the node answered: rich
tables for people, JSON for scripts.

Every value from the node is shown as plain text (rich `Text`), never as console markup, so an entry whose
content holds `[bold]` or `[/]` prints as written.
"""

from __future__ import annotations

import os
from typing import Any

import msgspec
from rich.console import Console
from rich.table import Table
from rich.text import Text

from wire.api import AgentListItem, EntryOut, Envelope, LinkOut, Snippet, SubscriptionOut
from wire.workflows import Graph, MessageOut, ReadyTask, TaskOut

CONTENT_PREVIEW = 160  # characters of an entry's content in a table row or a tail line
OFF_TERMINAL_WIDTH = 160
WIDE, MEDIUM = 120, 100  # console widths from which entry tables show the time, and the author, beside the content


def to_json(value: Any) -> str:
    """One value (a wire Struct, a list of them, ...) as compact JSON."""
    return msgspec.json.encode(value).decode()


def short_did(did: str) -> str:
    """A did:key shortened for a table cell (the full id is in --json)."""
    if did.startswith("did:key:") and len(did) > 24:
        return f"{did[:14]}…{did[-6:]}"
    return did


def preview(content: str, limit: int = CONTENT_PREVIEW) -> str:
    """An entry's content on one line, cut at `limit` characters."""
    flat = " ".join(content.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _text(value: object) -> Text:
    return Text("" if value is None else str(value))


def _table(*columns: str, title: str | None = None) -> Table:
    """A table whose cells keep to one line; the last column (the text) folds when the width runs out."""
    table = Table(title=title, header_style="bold", title_justify="left")
    for name in columns[:-1]:
        table.add_column(name, no_wrap=True)
    table.add_column(columns[-1], overflow="fold")
    return table


def _flags(entry: EntryOut) -> str:
    marks: list[str] = [entry.truth_state] if entry.truth_state != "fact" else []
    marks += [name for name, on in (("retracted", entry.retracted), ("superseded", entry.superseded)) if on]
    return ",".join(marks)


def entries_table(
    entries: list[EntryOut],
    title: str | None = None,
    width: int = OFF_TERMINAL_WIDTH,
    snippets: dict[str, Snippet] | None = None,
) -> Table:
    """Entries as rows: id, type and performative, tags, content preview, and on a console `width` wide enough
    for them beside the content, when (to the minute) and the author. An entry with a search snippet (keyed by
    record hash) shows the snippet, its matches in bold, instead of the preview."""
    columns = ["id", "created", "author", "type", "tags", "content"]
    if width < WIDE:
        columns.remove("created")
    if width < MEDIUM:
        columns.remove("author")
    table = _table(*columns, title=title)
    for e in entries:
        kind = f"{e.entry_type}/{e.performative}"
        flags = _flags(e)
        cells = {
            "id": e.id,
            "created": e.created_at[:16].replace("T", " "),
            "author": short_did(e.author_id),
            "type": f"{kind} ({flags})" if flags else kind,
            "tags": ", ".join(e.tags),
            "content": preview(e.content),
        }
        snippet = (snippets or {}).get(e.record_hash)
        table.add_row(
            *(snippet_text(snippet) if name == "content" and snippet else _text(cells[name]) for name in columns)
        )
    return table


def snippet_text(snippet: Snippet) -> Text:
    """A search snippet on one line with its highlights in bold (they are UTF-8 byte offsets into its text)."""
    raw = snippet.text.encode()
    text = Text()
    at = 0
    for start, end in sorted(snippet.highlights):
        if start < at or end > len(raw):  # overlapping or out of range: left unmarked, never an error
            continue
        text.append(_one_line(raw[at:start]))
        text.append(_one_line(raw[start:end]), style="bold")
        at = end
    text.append(_one_line(raw[at:]))
    return text


def _one_line(part: bytes) -> str:
    return part.decode(errors="replace").translate(_LINE_BREAKS)


_LINE_BREAKS = str.maketrans("\n\r\t", "   ")


def _grid(rows: list[tuple[str, object]]) -> Table:
    """Name and value pairs as two columns, the names in bold, long values folded."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column(overflow="fold")
    for name, value in rows:
        grid.add_row(name, _text(value))
    return grid


def entry_detail(entry: EntryOut) -> Table:
    """One entry in full: every field, its content unabridged."""
    rows: list[tuple[str, object]] = [
        ("id", entry.id),
        ("record_hash", entry.record_hash),
        ("author", entry.author_id),
        ("created", entry.created_at),
        ("type", f"{entry.entry_type}/{entry.performative}"),
        ("confidence", entry.confidence),
        ("tags", ", ".join(entry.tags)),
        ("directed_to", ", ".join(entry.directed_to)),
        ("truth_state", entry.truth_state),
        ("scope", entry.scope),
    ]
    flags = [name for name, on in (("retracted", entry.retracted), ("superseded", entry.superseded)) if on]
    if flags:
        rows.append(("status", ", ".join(flags)))
    if entry.metadata:
        rows.append(("metadata", to_json(entry.metadata)))
    grid = _grid(rows)
    grid.add_row("content", Text(entry.content))
    return grid


def links_table(links: list[LinkOut], title: str = "links") -> Table:
    """Links as rows: type, source and target hashes (shortened), author, and whether both ends are here."""
    table = _table("type", "source", "target", "author", "resolved", title=title)
    for link in links:
        table.add_row(
            _text(link.link_type),
            _text(link.source[:12]),
            _text(link.target[:12]),
            _text(short_did(link.author_id)),
            _text("yes" if link.resolved else "pending"),
        )
    return table


def inbox_table(notifications: list[Envelope]) -> Table:
    """Notifications (metadata only) as rows."""
    table = _table("notification", "tier", "reason", "entry", "type", "author", "tags", "created")
    for n in notifications:
        table.add_row(
            _text(n.notification_id),
            _text(n.tier),
            _text(n.reason),
            _text(n.entry_id),
            _text(f"{n.entry_type}/{n.performative}"),
            _text(short_did(n.author)),
            _text(", ".join(n.tags)),
            _text(n.created_at),
        )
    return table


def subscriptions_table(subscriptions: list[SubscriptionOut], title: str = "subscriptions") -> Table:
    """Subscriptions as rows: id, then each filter list ("any" when empty: it matches every value)."""
    table = _table("id", "tags", "types", "performatives", "authors", "directed", title=title)

    def each(values: list[str]) -> Text:
        return _text(", ".join(values) or "any")

    for sub in subscriptions:
        table.add_row(
            _text(sub.id),
            each(sub.tags),
            each(sub.entry_types),
            each(sub.performatives),
            _text(", ".join(short_did(a) for a in sub.authors) or "any"),
            _text("only directed to me" if sub.directed else "no"),
        )
    return table


def messages_table(messages: list[MessageOut], title: str | None = None) -> Table:
    """Bus messages as rows: id, when, sender, addressee (everyone for a broadcast), type, project, body."""
    table = _table("id", "created", "from", "to", "type", "project", "body", title=title)
    for msg in messages:
        table.add_row(
            _text(msg.id),
            _text(msg.created_at[:19].replace("T", " ")),
            _text(short_did(msg.from_agent)),
            _text(short_did(msg.to_agent) if msg.to_agent else "everyone"),
            _text(msg.message_type),
            _text(msg.project or ""),
            _text(preview(msg.body) + (f" {to_json(msg.payload)}" if msg.payload else "")),
        )
    return table


def task_detail(task: TaskOut) -> Table:
    """One task in full: its state, its lease (the fencing token a release or completion names), checkpoint."""
    rows: list[tuple[str, object]] = [
        ("id", task.id),
        ("key", task.key),
        ("title", task.title),
        ("status", task.status),
        ("depends_on", ", ".join(task.depends_on)),
        ("waiting_on", ", ".join(task.waiting_on)),
        ("home_node", task.home_node),
        ("updated", task.updated_at),
    ]
    if task.lease is not None:
        rows += [("lease", task.lease.lease_id), ("holder", task.lease.holder), ("expires", task.lease.expires_at)]
    if task.checkpoint:
        rows.append(("checkpoint", to_json(task.checkpoint)))
    return _grid(rows)


def ready_table(tasks: list[ReadyTask]) -> Table:
    """Tasks that can start now."""
    table = _table("id", "key", "title", "depends on", title="ready tasks")
    for t in tasks:
        table.add_row(_text(t.id), _text(t.key), _text(t.title), _text(", ".join(t.depends_on)))
    return table


def graph_tables(graph: Graph) -> list[Table]:
    """The task graph: its tasks with their state, then its `precedes` edges."""
    tasks = _table("id", "key", "title", "state", "lease holder", title="tasks")
    for n in graph.nodes:
        tasks.add_row(_text(n.id), _text(n.key), _text(n.title), _text(n.state), _text(short_did(n.lease_holder or "")))
    edges = _table("before", "after", title="precedes")
    for e in graph.edges:
        edges.add_row(_text(e.from_key + ("" if e.from_id is not None else " (not declared)")), _text(e.to_key))
    return [tasks, edges]


def agents_table(agents: list[AgentListItem]) -> Table:
    """Agents as rows: local name, did, kind, who keeps the key, entries, display name."""
    table = _table("name", "agent", "type", "key", "entries", "display name", title="agents")
    for a in agents:
        key = "node" if a.key_kept else ("agent" if a.name is not None else "remote")
        table.add_row(
            _text(a.name or "-"),
            _text(a.agent_id),
            _text(a.agent_type or ""),
            _text(key),
            _text(a.entry_count),
            _text(a.display_name),
        )
    return table


def tail_line(entry: EntryOut) -> Text:
    """One entry as one line of `bbs tail`."""
    line = Text()
    line.append(f"#{entry.id} ", style="bold")
    line.append(f"{entry.created_at} ", style="dim")
    line.append(f"{short_did(entry.author_id)} ")
    line.append(f"{entry.entry_type}/{entry.performative}", style="cyan")
    if entry.tags:
        line.append(" [" + ", ".join(entry.tags) + "]", style="green")
    line.append(" " + preview(entry.content))
    return line


def console() -> Console:
    """A console on the current stdout: colour only on a terminal; off one (a pipe, a file) as wide as
    $COLUMNS says, else OFF_TERMINAL_WIDTH rather than rich's 80, so rows keep to a line."""
    out = Console(highlight=False)
    if not out.is_terminal and "COLUMNS" not in os.environ:
        out = Console(highlight=False, width=OFF_TERMINAL_WIDTH)
    return out
