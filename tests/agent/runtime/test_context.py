"""Context assembly within each model profile's budget: drop stage 4, then stage 3; never identity or instructions."""

from __future__ import annotations

import pytest

from agent.runtime.config import PROFILE_TOKENS
from agent.runtime.context import ContextBudgetError, Item, Stages, assemble, estimate_tokens

IDENTITY = "I am the careful researcher. " * 20
INSTRUCTIONS = "Reply with JSON actions. " * 40


def stages(fetched: int, history: int, size: int) -> Stages:
    return Stages(
        identity=IDENTITY,
        core=[Item("core summary " + "c" * 200, 1.0)],
        batch=[Item(f"notification {i}", 5.0 - i) for i in range(3)],
        history=[Item(f"history {i} " + "h" * size, 1.0) for i in range(history)],
        fetched=[Item(f"fetched {i} " + "f" * size, 1.0) for i in range(fetched)],
        instructions=INSTRUCTIONS,
    )


def test_token_estimate_is_four_characters() -> None:
    assert [estimate_tokens(t) for t in ("", "abc", "abcd", "abcde")] == [0, 1, 1, 2]


@pytest.mark.parametrize("profile", ["small", "medium", "large"])
def test_truncation_order_for_each_profile(profile: str) -> None:
    budget = PROFILE_TOKENS[profile] - 512
    chunk = budget  # characters per item: each item is about a quarter of the budget
    # fits entirely
    ctx = assemble(stages(1, 1, chunk // 8), budget)
    assert ctx.dropped == {} and ctx.tokens <= budget
    # a little over: only fetched content goes
    ctx = assemble(stages(4, 2, chunk), budget)
    assert ctx.tokens <= budget
    assert ctx.dropped.get("fetched", 0) >= 1 and "history" not in ctx.dropped
    # far over: every fetched item goes before any history, then history goes too
    ctx = assemble(stages(4, 8, chunk), budget)
    assert ctx.dropped["fetched"] == 4 and ctx.dropped["history"] >= 5
    assert "batch" not in ctx.dropped and "core" not in ctx.dropped
    user = ctx.messages[1]["content"]
    assert ctx.messages[0]["content"] == IDENTITY  # identity whole
    assert user.endswith(INSTRUCTIONS)  # instructions whole and last
    assert "## Fetched content" not in user and "## Notification batch" in user


def test_stage_order_in_the_prompt() -> None:
    ctx = assemble(stages(1, 1, 10), 4096)
    user = ctx.messages[1]["content"]
    marks = [
        user.index(h) for h in ("## Core memory", "## Notification batch", "## Relevant history", "## Fetched content")
    ]
    assert marks == sorted(marks) and user.index(INSTRUCTIONS) > marks[-1]


def test_lowest_scored_notifications_go_after_history_and_one_stays() -> None:
    s = stages(0, 0, 0)
    s.batch = [Item(f"notification {i} " + "n" * 2000, float(i)) for i in range(6)]
    ctx = assemble(s, 1200)
    assert ctx.dropped["batch"] >= 1 and ctx.tokens <= 1200
    assert "notification 5" in ctx.messages[1]["content"]  # the best one is kept
    assert ctx.messages[0]["content"] == IDENTITY


def test_identity_and_instructions_alone_over_budget() -> None:
    with pytest.raises(ContextBudgetError):
        assemble(Stages(identity="x" * 20_000, instructions="y" * 4000), 4096 - 512)


@pytest.mark.parametrize("profile", ["small", "medium", "large"])
def test_fetched_text_is_whole_within_the_budget_and_clipped_to_it_beyond(profile: str) -> None:
    budget = PROFILE_TOKENS[profile] - 512
    s = stages(0, 1, 100)
    room = budget - assemble(s, budget).tokens - 2 * 8  # what stage 4 (its heading and one item) may take
    fits = "w" * (room * 4)  # exactly what fits: longer than any fixed clip of 4,000 characters in the larger profiles
    s.fetched = [Item(fits, 1.0)]
    ctx = assemble(s, budget)
    assert ctx.clipped == 0 and ctx.dropped == {} and fits in ctx.messages[1]["content"]
    s.fetched = [Item("first " + fits, 1.0)]  # a little too long: clipped to fit, never dropped whole
    ctx = assemble(s, budget)
    assert ctx.clipped == 1 and ctx.dropped == {} and ctx.tokens <= budget
    shown = ctx.messages[1]["content"].split("## Fetched content\n\n")[1].split("\n\n")[0]
    assert shown.startswith("first ww") and shown.endswith("…")
    assert "h" * 100 in ctx.messages[1]["content"]  # stage 3 stays while stage 4 can give way


def test_a_fetched_text_that_cannot_keep_enough_is_dropped_not_clipped() -> None:
    s = stages(2, 0, 0)
    s.fetched = [Item("kept " + "k" * 400, 2.0), Item("last " + "l" * 40_000, 1.0)]
    base = assemble(stages(0, 0, 0), 100_000).tokens
    ctx = assemble(s, base + 8 + (8 + 102) + 8 + 20)  # room for the first item and 20 tokens more
    assert ctx.dropped == {"fetched": 1} and ctx.clipped == 0
    assert "kept kkk" in ctx.messages[1]["content"] and "last l" not in ctx.messages[1]["content"]
