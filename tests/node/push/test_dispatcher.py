"""The dispatcher on a real node: the after-commit wake-up, the scan's cursor and filter, and the overflow count."""

from __future__ import annotations

import asyncio

from node.push import dispatcher as dispatch
from node.push.dispatcher import Dispatcher
from node.push.endpoints import PushEndpoints
from node.push.sender import PushSettings
from node.service import Node
from wire.api import PostEntry, SignedSubmission
from wire.push import PushEndpointIn


async def test_scan_reads_new_pending_notifications_and_counts_the_overflow(node: Node, make_agent) -> None:  # type: ignore[no-untyped-def]
    alice, bob = await make_agent("alice"), await make_agent("bob")
    entries: list[PostEntry | SignedSubmission] = [
        PostEntry("question", "request", f"q{i}", directed_to=[bob.agent_id]) for i in range(dispatch.SCAN_LIMIT + 5)
    ]
    await node.entries.post_batch(alice.agent_id, entries[:100])
    for start in range(100, len(entries), 100):
        await node.entries.post_batch(alice.agent_id, entries[start : start + 100])
    upto, new, rest = await node.db.read(lambda c: dispatch.scan(c, 0, [bob.agent_id]))
    assert upto == len(entries) and len(new) == dispatch.SCAN_LIMIT
    assert rest == [(bob.agent_id, 1, "directed_request", 5)]
    assert await node.db.read(lambda c: dispatch.scan(c, upto, [bob.agent_id])) == (upto, [], [])
    assert (await node.db.read(lambda c: dispatch.scan(c, 0, [alice.agent_id])))[1] == []


async def test_a_commit_wakes_the_dispatcher_only_while_endpoints_exist(node: Node, make_agent) -> None:  # type: ignore[no-untyped-def]
    alice, bob = await make_agent("alice"), await make_agent("bob")
    store = PushEndpoints(node.db, node.now_ms)
    d = Dispatcher(node.db, node.key, store, PushSettings())
    await d.start()
    try:
        assert d._after_commit not in node.db.after_commit  # nobody to push to: the dispatcher is not called
        endpoint, _ = await store.register(bob.agent_id, PushEndpointIn(url="http://127.0.0.1:9/p"))
        await d.reload()
        assert d._after_commit in node.db.after_commit
        runner = asyncio.create_task(d.run())
        await node.entries.post(alice.agent_id, PostEntry("question", "request", "q", directed_to=[bob.agent_id]), None)
        for _ in range(200):  # woken after the commit, the dispatcher scans and moves its cursor
            if d.cursor > 0:
                break
            await asyncio.sleep(0.01)
        runner.cancel()
        assert d.cursor > 0
        await store.delete(bob.agent_id, endpoint.id)
        await d.reload()
        assert d._after_commit not in node.db.after_commit and d.senders == {}
    finally:
        await d.stop()


async def test_the_scan_pushes_a_redaction_notice_with_no_body(node: Node, make_agent) -> None:  # type: ignore[no-untyped-def]
    from wire.api import InboxQuery

    alice, bob = await make_agent("alice"), await make_agent("bob")
    ((posted, _),) = await node.entries.post_batch(alice.agent_id, [PostEntry("question", "request", "the PIN is 0451",
                                                                         directed_to=[bob.agent_id])])  # fmt: skip
    seen = await node.inbox.poll(bob.agent_id, InboxQuery(mark_delivered=True))
    assert [n.record_hash for n in seen.notifications] == [posted.record_hash]
    upto = (await node.db.read(lambda c: dispatch.scan(c, 0, [bob.agent_id])))[0]
    out = await node.redactions.redact(alice.agent_id, posted.record_hash, None)
    _, new, _ = await node.db.read(lambda c: dispatch.scan(c, upto, [bob.agent_id]))
    [(agent, notice)] = new
    assert (agent, notice.reason, notice.redaction, notice.record_hash) == (
        bob.agent_id, "redacted", out.redaction, posted.record_hash,
    )  # fmt: skip
    assert (notice.entry_type, notice.tags) == ("", [])
