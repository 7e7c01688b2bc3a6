"""How the people commands show answers (agent/people_format.py): plain text, never markup; short ids; JSON."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from agent import people_format as fmt
from wire.api import AgentListItem, EntryOut, Envelope, LinkOut, Snippet, SubscriptionOut
from wire.workflows import Graph, GraphEdge, GraphNode, LeaseOut, MessageOut, ReadyTask, TaskOut

DID = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK"


def entry(**fields: object) -> EntryOut:
    values: dict[str, object] = {
        "id": 7,
        "record_hash": "a" * 64,
        "content_fingerprint": "b" * 64,
        "author_id": DID,
        "created_at": "2026-01-02T03:04:05Z",
        "entry_type": "finding",
        "performative": "inform",
        "content": "plain [red]not red[/red]\nsecond line",
        "confidence": 0.5,
        "tags": ["perf", "cache"],
        "directed_to": [],
        "metadata": {},
        "truth_state": "fact",
        "authority": "raw",
        "scope": "federation",
        "signature": "sig",
        "retracted": False,
        "superseded": False,
    }
    values.update(fields)
    return EntryOut(**values)  # type: ignore[arg-type]


def render(*items: object) -> str:
    out = io.StringIO()
    console = Console(file=out, width=200, color_system=None)
    for item in items:
        console.print(item)
    return out.getvalue()


def test_short_did_and_preview() -> None:
    assert fmt.short_did(DID) == DID[:14] + "…" + DID[-6:]
    assert fmt.short_did("did:key:z6Mk") == "did:key:z6Mk"
    assert fmt.preview("a\n b\t c") == "a b c"
    assert fmt.preview("x" * 300, 10) == "x" * 9 + "…"


def test_content_is_printed_as_written_never_as_markup() -> None:
    shown = render(fmt.entries_table([entry()]), fmt.tail_line(entry()), fmt.entry_detail(entry()))
    assert shown.count("[red]not red[/red]") == 3
    assert "second line" in shown


def test_a_search_snippet_replaces_the_preview_with_its_matches_in_bold() -> None:
    text = "…le café [b]cache\nhit"  # byte offsets: "…" and "é" take 3 and 2 bytes
    raw = text.encode()
    at = raw.index("café".encode())
    snippet = Snippet(
        text=text, highlights=[[at, at + len("café".encode())], [raw.index(b"cache"), raw.index(b"cache") + 5]]
    )
    shown = fmt.snippet_text(snippet)
    assert shown.plain == "…le café [b]cache hit"
    assert [shown.plain[s.start : s.end] for s in shown.spans if s.style == "bold"] == ["café", "cache"]
    table = render(fmt.entries_table([entry(), entry(id=8, record_hash="c" * 64)], snippets={"a" * 64: snippet}))
    assert "…le café [b]cache hit" in table and "[red]not red[/red]" in table  # the other entry keeps its preview


def test_a_snippet_with_bad_highlights_is_shown_unmarked() -> None:
    shown = fmt.snippet_text(Snippet(text="abc", highlights=[[1, 9], [1, 3], [0, 2]]))
    assert shown.plain == "abc"
    assert [shown.plain[s.start : s.end] for s in shown.spans] == ["ab"]  # out of range and overlapping: unmarked


def test_flags_show_synthetic_retracted_and_superseded() -> None:
    shown = render(fmt.entries_table([entry(truth_state="simulation", retracted=True)]))
    assert "simulation,retracted" in shown
    assert "status" in render(fmt.entry_detail(entry(superseded=True)))


def test_links_inbox_tasks_and_graph_tables() -> None:
    link = LinkOut(1, "c" * 64, "a" * 64, "d" * 64, "supports", DID, "2026-01-02T03:04:05Z", "", False, False)
    assert "pending" in render(fmt.links_table([link]))
    note = Envelope(
        3, 7, "a" * 64, DID, "2026-01-02T03:04:05Z", "finding", "request", ["x"], 0.5, True, [], 1, "directed", 0
    )
    assert "directed" in render(fmt.inbox_table([note]))
    assert "Build" in render(fmt.ready_table([ReadyTask(1, "build", "Build", [], {}, DID)]))
    graph = Graph(
        [GraphNode(2, "ship", "Ship", "blocked", None)],
        [GraphEdge("precedes", "build", "ship", None, 2)],
        ["build"],
        False,
    )
    shown = render(*fmt.graph_tables(graph))
    assert "blocked" in shown and "build (not declared)" in shown


def test_to_json_is_compact_json_of_the_wire_struct() -> None:
    assert json.loads(fmt.to_json(entry()))["id"] == 7


def test_console_off_a_terminal_is_wide(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    assert fmt.console().width == fmt.OFF_TERMINAL_WIDTH


def test_entry_tables_leave_out_time_then_author_on_narrow_consoles() -> None:
    for width, shown, hidden in [
        (160, ["created", "author"], []),
        (110, ["author"], ["created"]),
        (80, [], ["created", "author"]),
    ]:
        out = io.StringIO()
        Console(file=out, width=width, color_system=None).print(fmt.entries_table([entry()], width=width))
        text = out.getvalue()
        assert "not red" in text  # the content column stays
        assert all(name in text for name in shown) and not any(name in text for name in hidden), (width, text)
        assert max(len(line) for line in text.splitlines()) <= width


def test_messages_subscriptions_tasks_and_agents_print_values_as_written() -> None:
    message = MessageOut(
        id=3, record_hash="c" * 64, from_agent=DID, to_agent=None, message_type="status", body="[bold]green[/]",
        payload={"run": 7}, dependency_ids=[], project="web", tags=[], authority="raw", truth_state="fact",
        confidence=0.5, created_at="2026-01-02T03:04:05.123Z",
    )  # fmt: skip
    shown = render(fmt.messages_table([message], title="sent"))
    assert "[bold]green[/]" in shown and '{"run":7}' in shown and "everyone" in shown and "2026-01-02 03:04:05" in shown

    sub = SubscriptionOut(
        id=4, agent_id=DID, tags=["[i]perf[/i]"], entry_types=[], performatives=["request"], authors=[DID],
        directed=True, created_at="2026-01-02T03:04:05Z",
    )  # fmt: skip
    shown = render(fmt.subscriptions_table([sub]))
    assert "[i]perf[/i]" in shown and "any" in shown and "only directed to me" in shown and fmt.short_did(DID) in shown

    lease = LeaseOut(lease_id="d" * 64, holder=DID, expires_at="2026-01-02T03:19:05Z")
    task = TaskOut(
        id=9, key="build", title="[red]Build[/red]", status="processing", depends_on=["fetch"], waiting_on=[],
        checkpoint={"step": 1}, home_node=DID, lease=lease, created_at="2026-01-02T03:00:00Z",
        updated_at="2026-01-02T03:04:05Z",
    )  # fmt: skip
    shown = render(fmt.task_detail(task))
    assert "[red]Build[/red]" in shown and "d" * 64 in shown and '{"step":1}' in shown and "fetch" in shown

    agents = [
        AgentListItem(agent_id=DID, name="ann", display_name="[b]Ann[/b]", description="", agent_type="assistant",
                      home_node=DID, created_at="2026-01-02T03:04:05Z", entry_count=2, key_kept=True),
        AgentListItem(agent_id=DID, name=None, display_name="Far", description="", agent_type=None, home_node=DID,
                      created_at="2026-01-02T03:04:05Z", entry_count=0, key_kept=False),
    ]  # fmt: skip
    rows = render(fmt.agents_table(agents)).splitlines()
    assert any("ann" in r and "[b]Ann[/b]" in r and "node" in r and "assistant" in r for r in rows)
    assert any("Far" in r and "remote" in r for r in rows)
