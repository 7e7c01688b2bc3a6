"""agent-config.yaml validation (errors name the field), soul.md loading, and `bbs agent init`."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.runtime.config import ConfigError, load_config, load_soul, parse_config
from node.cli import main


def test_empty_config_is_all_defaults() -> None:
    config = parse_config("")
    assert (config.polling.active_min_s, config.polling.idle_max_s) == (5, 60)
    assert config.budget_tokens == 4096
    assert parse_config("model: {profile: large}").budget_tokens == 32768


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("polling: {active_min_s: -1}", "$.polling.active_min_s"),
        ("polling: {active_min_s: fast}", "$.polling.active_min_s"),
        ("polling: {actve_min_s: 5}", "$.polling.actve_min_s"),  # the unknown key itself
        ("scoring: {weights: {directed: 1000}}", "$.scoring.weights.directed"),
        ("scoring: {activation_threshold: 0}", "$.scoring.activation_threshold"),
        ("model: {profile: huge}", "$.model.profile"),
        ("polling: {active_min_s: 9, active_max_s: 6}", "$.polling.active_min_s"),
        ("polling: {active_max_s: 40}", "$.polling.active_max_s"),
        ("schedule: {hygiene: '61 * * * *'}", "$.schedule.hygiene"),
        ("schedule: {synthesis_review: 'daily'}", "$.schedule.synthesis_review"),
        ("schedule: {synthesis_review: '0 0 31 2 *'}", "$.schedule.synthesis_review"),  # parses, never matches
        ("model: {max_reply_tokens: 4000}", "$.model.max_reply_tokens"),
        ("surprise: 1", "$.surprise"),
        ("[1, 2]", "$"),
        ("polling: {active_min_s: [", "$"),
    ],
)
def test_bad_config_names_the_field(text: str, field: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(text)
    assert info.value.field == field


def test_soul_comments_dropped_and_empty_soul_refused(tmp_path: Path) -> None:
    soul = tmp_path / "soul.md"
    soul.write_text("<!-- a note -->\nI am careful.\n")
    assert load_soul(soul) == "I am careful."
    soul.write_text("<!-- only a note -->\n")
    with pytest.raises(ConfigError):
        load_soul(soul)
    with pytest.raises(ConfigError):
        load_config(tmp_path / "missing.yaml")


def test_agent_init_writes_files_that_load(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "agent"
    assert main(["agent", "init", str(target)]) == 0
    config = load_config(target / "agent-config.yaml")
    assert config.scoring.watched_tags == ["billing", "perf"]
    assert load_soul(target / "soul.md").startswith("# Who I am")
    assert "# Skill: bbs-operations" in (target / "bbs-operations.md").read_text()
    assert main(["agent", "init", str(target)]) == 1  # nothing overwritten without --force
    assert "already in" in capsys.readouterr().err


def test_agent_run_refuses_bad_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "c.yaml").write_text("memory: {compact_after_days: 0}\n")
    (tmp_path / "soul.md").write_text("I am.\n")
    assert main(["agent", "run", "--config", str(tmp_path / "c.yaml"), "--soul", str(tmp_path / "soul.md")]) == 2
    assert "$.memory.compact_after_days" in capsys.readouterr().err
