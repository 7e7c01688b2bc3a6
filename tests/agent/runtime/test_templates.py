"""agent.runtime.templates: the soul.md and agent-config.yaml that `bbs agent init` writes."""

from __future__ import annotations

from pathlib import Path

import msgspec
import yaml

from agent.runtime.config import AgentConfig, load_soul, parse_config
from agent.runtime.cron import Cron
from agent.runtime.templates import AGENT_CONFIG_YAML, SOUL_MD


def test_init_template_shows_every_default() -> None:
    shown = parse_config(AGENT_CONFIG_YAML)
    defaults = AgentConfig()
    defaults.scoring.watched_tags = ["billing", "perf"]  # the template's example
    assert msgspec.to_builtins(shown) == msgspec.to_builtins(defaults)
    for section, settings in msgspec.structs.asdict(defaults).items():
        for name in msgspec.structs.asdict(settings):
            assert f"  {name}:" in AGENT_CONFIG_YAML, f"{section}.{name} is not in the template"


def test_the_template_has_every_section_and_only_those() -> None:
    assert list(yaml.safe_load(AGENT_CONFIG_YAML)) == list(AgentConfig.__struct_fields__)


def test_the_schedule_in_the_template_is_valid_cron() -> None:
    schedule = yaml.safe_load(AGENT_CONFIG_YAML)["schedule"]
    assert set(schedule) == {"synthesis_review", "hygiene"}
    for expr in schedule.values():
        Cron(expr)


def test_the_soul_template_keeps_its_text_and_drops_its_comments(tmp_path: Path) -> None:
    path = tmp_path / "soul.md"
    path.write_text(SOUL_MD)
    soul = load_soul(path)
    assert soul.startswith("# Who I am") and "<!--" not in soul and "bbs-operations" not in soul
    assert "# What I value" in soul and "# What I watch" in soul
