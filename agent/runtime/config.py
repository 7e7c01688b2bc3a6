"""The three-way configuration: soul.md (identity, free text), agent-config.yaml (numbers, validated here) and
the bbs-operations skill (procedures, agent/skills/bbs-operations.md).

Errors name the offending field as a JSON path (`$.polling.active_min_s`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Literal

import msgspec
import yaml

from agent.runtime.cron import Cron, CronError
from wire.validation import split_validation_error

PROFILE_TOKENS = {"small": 4096, "medium": 16384, "large": 32768}
SKILL_PATH = Path(__file__).resolve().parent.parent / "skills" / "bbs-operations.md"

Seconds = Annotated[float, msgspec.Meta(gt=0, le=86_400)]
Weight = Annotated[float, msgspec.Meta(ge=-100, le=100)]
Tag = Annotated[str, msgspec.Meta(min_length=1, max_length=64)]


class ConfigError(Exception):
    """agent-config.yaml or soul.md is invalid; `field` names the offending field."""

    def __init__(self, message: str, field: str = "$") -> None:
        super().__init__(f"{message} (at {field})")
        self.message = message
        self.field = field


class NodeSettings(msgspec.Struct, forbid_unknown_fields=True):
    """Where the node is and how to authenticate: an API key from an environment variable or an identity file."""

    url: str = "http://127.0.0.1:8420"
    api_key_env: str = "BBS_API_KEY"
    identity: str | None = None
    passphrase_env: str | None = None


class PollingSettings(msgspec.Struct, forbid_unknown_fields=True):
    """Adaptive polling: active while there is activity, idle after `idle_after_s` of quiet."""

    active_min_s: Seconds = 5.0
    active_max_s: Seconds = 10.0
    idle_min_s: Seconds = 30.0
    idle_max_s: Seconds = 60.0
    idle_after_s: Seconds = 120.0
    backoff_base_s: Seconds = 5.0
    backoff_max_s: Seconds = 300.0
    jitter: Annotated[float, msgspec.Meta(ge=0, le=0.5)] = 0.1
    inbox_limit: Annotated[int, msgspec.Meta(ge=1, le=200)] = 50


class Weights(msgspec.Struct, forbid_unknown_fields=True):
    """Scorer weights: a notification's score is the sum of weight x feature (features are 0..1)."""

    directed: Weight = 3.0
    watched_tag: Weight = 1.5
    followed_author: Weight = 1.0
    confidence: Weight = 0.5
    question: Weight = 1.0
    links_to_own: Weight = 2.0
    recency: Weight = 0.5


class ScoringSettings(msgspec.Struct, forbid_unknown_fields=True):
    """Batched tier: engage when the summed score of the pending batch reaches `activation_threshold`."""

    weights: Weights = msgspec.field(default_factory=Weights)
    activation_threshold: Annotated[float, msgspec.Meta(gt=0, le=1000)] = 3.0
    recency_half_life_s: Seconds = 3600.0
    max_batch: Annotated[int, msgspec.Meta(ge=1, le=50)] = 8
    watched_tags: Annotated[list[Tag], msgspec.Meta(max_length=32)] = []
    followed_authors: Annotated[list[str], msgspec.Meta(max_length=32)] = []


class ScheduleSettings(msgspec.Struct, forbid_unknown_fields=True):
    """Scheduled tier: five-field cron expressions (UTC); null switches a job off."""

    synthesis_review: str | None = "0 */6 * * *"
    hygiene: str | None = "30 3 * * *"


class ModelSettings(msgspec.Struct, forbid_unknown_fields=True):
    """The chat engine and its context budget (small 4K, medium 16K, large 32K tokens)."""

    profile: Literal["small", "medium", "large"] = "small"
    engine: Literal["openai", "scripted"] = "openai"
    base_url: str = "http://127.0.0.1:8080/v1"
    model: str = "local"
    api_key_env: str | None = None
    max_reply_tokens: Annotated[int, msgspec.Meta(ge=64, le=8192)] = 512
    temperature: Annotated[float, msgspec.Meta(ge=0, le=2)] = 0.2
    timeout_s: Seconds = 120.0


class MemorySettings(msgspec.Struct, forbid_unknown_fields=True):
    """Working memory: a local SQLite file (relative to the config file), decay and compaction."""

    path: str = "memory.sqlite"
    compact_after_days: Annotated[int, msgspec.Meta(ge=1, le=3650)] = 90
    time_half_life_h: Annotated[float, msgspec.Meta(gt=0, le=87_600)] = 72.0
    access_half_life_h: Annotated[float, msgspec.Meta(gt=0, le=87_600)] = 24.0
    access_weight: Annotated[float, msgspec.Meta(ge=0, le=10)] = 0.5
    forget_below: Annotated[float, msgspec.Meta(ge=0, le=1)] = 0.05
    cold_start_limit: Annotated[int, msgspec.Meta(ge=0, le=200)] = 20


class PushSettings(msgspec.Struct, forbid_unknown_fields=True):
    """How the agent learns of notifications: `poll` (the default) or `push`, where the node sends an NLIP hint to
    a small listener of the runtime, which then polls at once (polling on its schedule stays the fallback)."""

    delivery: Literal["poll", "push"] = "poll"
    listen_host: str = "127.0.0.1"
    listen_port: Annotated[int, msgspec.Meta(ge=0, le=65535)] = 0  # 0: any free port
    url: str | None = None  # the URL the node calls; default http://listen_host:port/push
    tiers: Annotated[list[Literal[1, 2]], msgspec.Meta(min_length=1, max_length=2)] = msgspec.field(
        default_factory=lambda: [1]
    )


class AgentConfig(msgspec.Struct, forbid_unknown_fields=True):
    """agent-config.yaml."""

    node: NodeSettings = msgspec.field(default_factory=NodeSettings)
    polling: PollingSettings = msgspec.field(default_factory=PollingSettings)
    scoring: ScoringSettings = msgspec.field(default_factory=ScoringSettings)
    schedule: ScheduleSettings = msgspec.field(default_factory=ScheduleSettings)
    model: ModelSettings = msgspec.field(default_factory=ModelSettings)
    memory: MemorySettings = msgspec.field(default_factory=MemorySettings)
    push: PushSettings = msgspec.field(default_factory=PushSettings)

    def crons(self) -> dict[str, Cron]:
        """The scheduled jobs that are switched on."""
        jobs = {"synthesis_review": self.schedule.synthesis_review, "hygiene": self.schedule.hygiene}
        return {name: Cron(expr) for name, expr in jobs.items() if expr is not None}

    @property
    def budget_tokens(self) -> int:
        return PROFILE_TOKENS[self.model.profile]


def parse_config(text: str) -> AgentConfig:
    """Validate agent-config.yaml text; raise ConfigError naming the bad field."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"not valid YAML: {exc}") from None
    if raw is None:
        raw = {}
    try:
        config = msgspec.convert(raw, AgentConfig)
    except msgspec.ValidationError as exc:
        message, path = split_validation_error(exc)
        raise ConfigError(message, path) from None
    _check(config)
    return config


def _check(config: AgentConfig) -> None:
    p = config.polling
    for lo, hi in (("active_min_s", "active_max_s"), ("idle_min_s", "idle_max_s")):
        if getattr(p, lo) > getattr(p, hi):
            raise ConfigError(f"{lo} must not exceed {hi}", f"$.polling.{lo}")
    if p.active_max_s > p.idle_min_s:
        raise ConfigError("the active interval must be shorter than the idle one", "$.polling.active_max_s")
    if p.backoff_base_s > p.backoff_max_s:
        raise ConfigError("backoff_base_s must not exceed backoff_max_s", "$.polling.backoff_base_s")
    for name in ("synthesis_review", "hygiene"):
        expr = getattr(config.schedule, name)
        if expr is not None:
            try:
                Cron(expr).next_after(0)  # parses, and matches some time (`0 0 31 2 *` never does)
            except CronError as exc:
                raise ConfigError(str(exc), f"$.schedule.{name}") from None
    if config.model.max_reply_tokens >= config.budget_tokens // 2:
        raise ConfigError("max_reply_tokens must be under half the profile's budget", "$.model.max_reply_tokens")


def load_config(path: Path) -> AgentConfig:
    """Read and validate an agent-config.yaml file."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    return parse_config(text)


def load_soul(path: Path) -> str:
    """soul.md: identity and values, free text. Comment lines (`<!-- ... -->`) are dropped."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}", "soul") from None
    text = re.sub(r"<!--.*?-->", "", text, flags=re.DOTALL).strip()
    if not text:
        raise ConfigError("soul.md is empty: write who the agent is and what it values", "soul")
    return text


def load_skill(path: Path | None = None) -> str:
    """The bbs-operations skill (procedures); the copy shipped with the package by default."""
    return (path or SKILL_PATH).read_text(encoding="utf-8")


def secret(env: str | None) -> str | None:
    """The value of an environment variable naming a secret, or None."""
    return os.environ.get(env) or None if env else None
