"""Context assembly: five stages packed into the model profile's token budget.

1. core memory: the soul (identity) and the agent's most relevant thread summaries
2. notification batch: the envelopes that woke the model (metadata)
3. relevant history: summaries of the threads those notifications belong to
4. fetched content: the full text of the chosen notifications' entries (fetched only for those), as far as the
   budget holds it
5. instructions: the bbs-operations skill and the reply format

The budget is the profile's window (small 4,096, medium 16,384, large 32,768 tokens) minus the tokens kept
for the reply. When over budget, items of stage 4 go first, last first: an item whose text can keep at least
`MIN_FETCHED_TOKENS` within the budget is clipped to what fits (an ellipsis marks the cut), one that cannot is
dropped. Then items of stage 3 are dropped, then the lowest-scored envelopes of stage 2 and the summaries of
stage 1, keeping at least one envelope. The identity
and the instructions are never truncated; if they alone do not fit, ContextBudgetError is raised.

Token estimate: ceil(characters / 4) per text plus 4 per message and 8 per item heading. Four characters per
token is the usual figure for English with BPE tokenizers; it overestimates code-free prose slightly,
which errs on the side of fitting.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

CHARS_PER_TOKEN = 4
MESSAGE_OVERHEAD = 4
ITEM_OVERHEAD = 8
MIN_FETCHED_TOKENS = 64  # a fetched text clipped shorter than this says too little to keep: it is dropped
ELLIPSIS = "…"


def estimate_tokens(text: str) -> int:
    """The documented estimate: one token per four characters, rounded up."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


class ContextBudgetError(Exception):
    """Identity and instructions alone exceed the budget."""


@dataclass
class Item:
    text: str
    priority: float = 0.0  # higher is kept longer

    @property
    def tokens(self) -> int:
        return estimate_tokens(self.text) + ITEM_OVERHEAD


@dataclass
class Stages:
    identity: str
    core: list[Item] = field(default_factory=list)
    batch: list[Item] = field(default_factory=list)
    history: list[Item] = field(default_factory=list)
    fetched: list[Item] = field(default_factory=list)
    instructions: str = ""


@dataclass
class Context:
    messages: list[dict[str, str]]
    tokens: int
    budget: int
    dropped: dict[str, int]
    clipped: int = 0  # fetched texts cut to fit the budget (0 or 1: only the last one kept can be)


TITLES = {
    "core": "Core memory",
    "batch": "Notification batch",
    "history": "Relevant history",
    "fetched": "Fetched content",
}


def _total(s: Stages) -> int:
    fixed = estimate_tokens(s.identity) + estimate_tokens(s.instructions) + 2 * MESSAGE_OVERHEAD
    items = sum(i.tokens for stage in (s.core, s.batch, s.history, s.fetched) for i in stage)
    return fixed + items + ITEM_OVERHEAD * sum(1 for stage in (s.core, s.batch, s.history, s.fetched) if stage)


def assemble(stages: Stages, budget: int) -> Context:
    """Pack the stages into `budget` tokens, dropping in the documented order; render chat messages."""
    s = Stages(
        stages.identity,
        list(stages.core),
        list(stages.batch),
        list(stages.history),
        list(stages.fetched),
        stages.instructions,
    )
    dropped = {"fetched": 0, "history": 0, "batch": 0, "core": 0}
    clipped = 0
    while _total(s) > budget and s.fetched:
        last = s.fetched[-1]
        room = estimate_tokens(last.text) - (_total(s) - budget)  # the tokens its text may keep
        if room >= MIN_FETCHED_TOKENS:
            s.fetched[-1] = Item(last.text[: room * CHARS_PER_TOKEN - 1] + ELLIPSIS, last.priority)
            clipped = 1
        else:
            s.fetched.pop()
            dropped["fetched"] += 1
            clipped = 0
    for name, keep in (("history", 0), ("batch", 1), ("core", 0)):
        items: list[Item] = getattr(s, name)
        if name in ("batch", "core"):
            items.sort(key=lambda i: -i.priority)  # the lowest priority goes first
        while _total(s) > budget and len(items) > keep:
            items.pop()
            dropped[name] += 1
    total = _total(s)
    if total > budget:
        raise ContextBudgetError(
            f"identity, instructions and one notification need {total} tokens; the budget is {budget}"
        )
    sections = [
        f"## {TITLES[name]}\n\n" + "\n\n".join(i.text for i in getattr(s, name))
        for name in ("core", "batch", "history", "fetched")
        if getattr(s, name)
    ]
    user = "\n\n".join([*sections, s.instructions])
    messages = [{"role": "system", "content": s.identity}, {"role": "user", "content": user}]
    return Context(messages, total, budget, {k: v for k, v in dropped.items() if v}, clipped)
