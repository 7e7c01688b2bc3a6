"""The three fixed templates. They are checklists, not generation: the caller's text is substituted
into fixed lists, no model is called, and the output is the same every time for the same input.

The fixed text names no risk word (words.RISK_STEMS), so the critic's risk rule judges what the caller
supplied, never this boilerplate.
"""

from __future__ import annotations

from typing import Any

STAKEHOLDER_LABEL = "speculative_general_pattern"

FUTURE_PATHS: dict[str, tuple[str, ...]] = {
    "best_case": (
        "What would have to go right for '{goal}' to succeed early?",
        "Which existing strengths does '{goal}' build on?",
        "Who benefits first if '{goal}' works, and how would you know?",
    ),
    "most_likely": (
        "What is the ordinary pace of work like '{goal}', judging by past records?",
        "Which dependencies of '{goal}' are usually late?",
        "What partial result of '{goal}' would still be useful?",
    ),
    "failure_path": (
        "What single breakdown would stop '{goal}' outright?",
        "Which assumption behind '{goal}' has the least evidence?",
        "What would you see first if '{goal}' were going wrong?",
    ),
    "hidden_risk": (
        "What does '{goal}' depend on that nobody owns?",
        "Whose personal data, which rules or contracts, and how much money could '{goal}' touch?",
        "What would be hard to undo once '{goal}' is done?",
    ),
    "low_effort": (
        "What is the smallest version of '{goal}' worth doing?",
        "What could be reused instead of built for '{goal}'?",
        "What can be dropped from '{goal}' without losing its point?",
    ),
}

# How each path is headed in the checklist text: the path names themselves say "failure" and "risk".
FUTURE_PATH_HEADINGS: dict[str, str] = {
    "best_case": "best case",
    "most_likely": "most likely",
    "failure_path": "going wrong",
    "hidden_risk": "blind spots",
    "low_effort": "low effort",
}

STAKEHOLDER_CONCERNS: tuple[str, ...] = (
    "How does '{proposal}' change {stakeholder}'s day-to-day work?",
    "What does {stakeholder} lose, or fear losing, under '{proposal}'?",
    "What would {stakeholder} need to see before trusting '{proposal}'?",
    "Who does {stakeholder} answer to about '{proposal}'?",
    "What has {stakeholder} been told before about changes like '{proposal}'?",
)

MESSAGE_ADJUSTMENTS: tuple[str, ...] = (
    "Lead with what '{proposal}' means for {stakeholder}, not with how it works.",
    "Name the cost to {stakeholder} plainly before they have to ask.",
    "Offer {stakeholder} a way to try '{proposal}' that can be reversed.",
    "Say what evidence supports '{proposal}' and what is still a guess.",
    "Ask {stakeholder} what would change their mind.",
)

REFRAMING_SEEDS: tuple[tuple[str, str], ...] = (
    ("invert", "What would make '{problem}' worse, and what is the opposite of each of those?"),
    ("constraint_removed", "If the hardest constraint on '{problem}' vanished, what would you do first?"),
    ("smallest_step", "What is the smallest step on '{problem}' that teaches you something?"),
    ("analogy", "Which solved problem elsewhere has the same shape as '{problem}'?"),
    ("stakeholder_swap", "How would the person most affected by '{problem}' describe it?"),
    ("time_shift", "How will '{problem}' look in a year if nothing is done?"),
)


def simulate_future(goal: str) -> tuple[str, dict[str, Any]]:
    """The five named paths for `goal`: (checklist text, structured payload)."""
    paths = {name: [item.format(goal=goal) for item in items] for name, items in FUTURE_PATHS.items()}
    lines = [f"Checklist (fixed template, not a prediction) for the goal: {goal}"]
    for name, items in paths.items():
        lines.append(f"{FUTURE_PATH_HEADINGS[name]}:")
        lines.extend(f"- {item}" for item in items)
    return "\n".join(lines), {"template": "simulate-future", "goal": goal, "paths": paths}


def stakeholder_simulation(stakeholder: str, proposal: str) -> tuple[str, dict[str, Any]]:
    """The fixed concerns and message adjustments for a named stakeholder, labelled speculative."""
    fill = {"stakeholder": stakeholder, "proposal": proposal}
    concerns = [item.format(**fill) for item in STAKEHOLDER_CONCERNS]
    adjustments = [item.format(**fill) for item in MESSAGE_ADJUSTMENTS]
    text = "\n".join(
        [f"{STAKEHOLDER_LABEL} (fixed template) for {stakeholder} on: {proposal}", "concerns:"]
        + [f"- {c}" for c in concerns]
        + ["message adjustments:"]
        + [f"- {a}" for a in adjustments]
    )
    payload = {
        "template": "stakeholder-simulation",
        "label": STAKEHOLDER_LABEL,
        "stakeholder": stakeholder,
        "proposal": proposal,
        "concerns": concerns,
        "message_adjustments": adjustments,
    }
    return text, payload


def incubate(problem: str) -> tuple[str, dict[str, Any]]:
    """The problem crossed with the six fixed reframing seeds."""
    seeds = [{"seed": name, "prompt": prompt.format(problem=problem)} for name, prompt in REFRAMING_SEEDS]
    text = "\n".join(
        [f"Reframings (fixed template) of the problem: {problem}"] + [f"- {s['seed']}: {s['prompt']}" for s in seeds]
    )
    return text, {"template": "incubate", "problem": problem, "seeds": seeds}
