"""Sync decisions are logged at info: each batch pulled, with its outcomes and the cursor it saved."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from tests.sync.test_federation import link


async def test_each_pulled_batch_is_logged_with_outcomes_and_cursor(
    make_peer: Any, caplog: pytest.LogCaptureFixture
) -> None:
    a, b = await make_peer("a"), await make_peer("b")
    await link(a, b)
    writer = await a.agent()
    for i in range(3):
        await a.post(writer, f"logged {i}")
    caplog.set_level(logging.INFO, logger="bbs.sync")
    await b.puller().pull_once(a.config)
    epoch, head = await a.sync.store.position()
    lines = [r.getMessage() for r in caplog.records if r.name == "bbs.sync" and r.levelno == logging.INFO]
    assert lines == [f"pulled 4 records from {a.node_id} (saved 4); cursor {epoch}/{head}"]  # agent doc + 3 entries
