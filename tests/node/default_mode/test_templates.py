"""node.default_mode.templates: three fixed checklists with the caller's text substituted, no model called."""

from __future__ import annotations

from node.default_mode import templates


def test_templates_are_fixed_and_substitute_input() -> None:
    text, payload = templates.simulate_future("move the node to a new disk")
    assert list(payload["paths"]) == ["best_case", "most_likely", "failure_path", "hidden_risk", "low_effort"]
    assert templates.simulate_future("move the node to a new disk") == (text, payload)
    assert all("move the node to a new disk" in item for items in payload["paths"].values() for item in items)
    _, stake = templates.stakeholder_simulation("the landlord", "a rooftop antenna")
    assert stake["label"] == "speculative_general_pattern"
    assert stake["concerns"] and stake["message_adjustments"]
    _, inc = templates.incubate("slow sync {braces} kept")
    assert len(inc["seeds"]) == 6 and all("slow sync {braces} kept" in s["prompt"] for s in inc["seeds"])


def test_simulate_future_text_and_payload() -> None:
    text, payload = templates.simulate_future("paint the shed")
    lines = text.splitlines()
    assert lines[0] == "Checklist (fixed template, not a prediction) for the goal: paint the shed"
    assert "best case:" in lines and "blind spots:" in lines
    assert len([line for line in lines if line.startswith("- ")]) == 15
    assert payload["template"] == "simulate-future" and payload["goal"] == "paint the shed"
    assert payload["paths"]["low_effort"][0] == "What is the smallest version of 'paint the shed' worth doing?"


def test_stakeholder_simulation_is_labelled_speculative() -> None:
    text, payload = templates.stakeholder_simulation("Bob", "a new rota")
    assert text.startswith("speculative_general_pattern (fixed template) for Bob on: a new rota\nconcerns:\n")
    assert "message adjustments:" in text.splitlines()
    assert payload["concerns"][0] == "How does 'a new rota' change Bob's day-to-day work?"
    assert len(payload["concerns"]) == 5 and len(payload["message_adjustments"]) == 5
    assert (payload["template"], payload["stakeholder"], payload["proposal"]) == ("stakeholder-simulation", "Bob",
                                                                                  "a new rota")  # fmt: skip


def test_incubate_crosses_the_problem_with_six_seeds() -> None:
    text, payload = templates.incubate("the sync is slow")
    assert [s["seed"] for s in payload["seeds"]] == [
        "invert", "constraint_removed", "smallest_step", "analogy", "stakeholder_swap", "time_shift",
    ]  # fmt: skip
    assert text.splitlines()[1] == (
        "- invert: What would make 'the sync is slow' worse, and what is the opposite of each of those?"
    )
    assert payload == {"template": "incubate", "problem": "the sync is slow", "seeds": payload["seeds"]}


def test_input_is_substituted_not_interpreted() -> None:
    """Braces and quotes in the caller's text are kept as written (str.format is applied to the template only)."""
    _, payload = templates.stakeholder_simulation("{stakeholder}", "'{proposal}' {0}")
    assert payload["concerns"][0] == "How does ''{proposal}' {0}' change {stakeholder}'s day-to-day work?"
