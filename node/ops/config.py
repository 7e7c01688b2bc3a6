"""The node's configuration: one msgspec Struct, filled from defaults < TOML file < BBS_* environment < CLI flags.

Every source is validated by the same Struct, so an unknown key or a bad value is refused with the key
named, wherever it came from. Environment variables are the field names upper-cased with a `BBS_`
prefix (`log_format` -> `BBS_LOG_FORMAT`); only known names are read, so other `BBS_*` variables
(used by agent clients, for instance) do not disturb a node.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

from sync.messages import MAX_WAIT_MS
from wire.validation import split_validation_error

Port = Annotated[int, msgspec.Meta(ge=0, le=65535)]
Seconds = Annotated[float, msgspec.Meta(gt=0, le=3600)]
ENV_PREFIX = "BBS_"


class ConfigError(Exception):
    """A configuration source could not be used; the message names the source and the key."""


class Config(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Settings of `bbs serve`. Field names are the TOML keys; `BBS_<NAME>` the environment variables."""

    data: str = "bbs-data"
    """The data folder (node.key, bbs.db)."""
    store: Annotated[str, msgspec.Meta(pattern=r"^(postgres(ql)?://.*)?$", max_length=4096)] = ""
    """The node's database: empty for bbs.db in the data folder (SQLite), or a `postgresql://` URL (the folder
    then keeps the key, the search index and the fences, and remembers the URL in store.url)."""
    host: str = "127.0.0.1"
    """Address the REST/MCP listener binds to."""
    port: Port = 8420
    """Port of the REST/MCP listener (0 picks a free port)."""
    log_format: Literal["text", "json"] = "text"
    """`text` for people, `json` for log collectors: one JSON object per line."""
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    """The lowest level written."""
    access_log: bool = True
    """One line per HTTP request (method, route, status, duration, request id)."""
    metrics_host: str = "127.0.0.1"
    """Address of the separate, unauthenticated metrics listener (only used when metrics_port is set)."""
    metrics_port: Port | None = None
    """Serve /metrics without authentication on this port too; /metrics on the main port always needs the
    admin token."""
    shutdown_timeout: Seconds = 10.0
    """Seconds in-flight requests get to finish after SIGTERM before connections are closed."""
    rate_limit_per_s: Annotated[float, msgspec.Meta(ge=0, le=1_000_000)] = 100.0
    """Requests per second each bearer credential (agent key, admin token) may sustain; 0 turns limits off."""
    rate_limit_burst: Annotated[int, msgspec.Meta(ge=1, le=1_000_000)] = 1000
    """Requests a credential may make at once before the per-second rate applies (429 with Retry-After)."""
    anon_rate_limit_per_s: Annotated[float, msgspec.Meta(ge=0, le=1_000_000)] = 50.0
    """Unauthenticated requests per second each client address may sustain (health, node info, the key-proof
    handshake; 401s of bad keys; peer sync requests whose signature fails); 0 turns this limit off."""
    anon_rate_limit_burst: Annotated[int, msgspec.Meta(ge=1, le=1_000_000)] = 500
    """Unauthenticated requests an address may make at once before its per-second rate applies (429)."""
    mcp_port: Port | None = None
    """Also serve MCP over streamable HTTP on this port (path /mcp), on the same host as the REST API."""
    sync: Literal["on", "off"] = "on"
    """`off` serves the sync endpoints to peers but never pulls from them."""
    sync_wait_ms: Annotated[int, msgspec.Meta(ge=0, le=MAX_WAIT_MS)] = 20_000
    """Long-poll time of the changes feed once a peer is caught up (milliseconds)."""
    reconcile_every_s: Annotated[float, msgspec.Meta(gt=0, le=86_400)] = 300.0
    """Seconds between reconciliations (negentropy) with each peer."""
    sync_min_poll_ms: Annotated[int, msgspec.Meta(ge=0, le=60_000)] = 250
    """Least time between the starts of two long-polls to one peer when the first came back empty early (a peer
    answering long-polls at once is not polled in a spin)."""
    search_fresh_timeout_ms: Annotated[int, msgspec.Meta(ge=0, le=60_000)] = 2000
    """Longest a search waits for the search index to cover the newest entries (with `fresh`, or the caller's
    own newest entry) before it answers from the index as it is, marked `stale` (milliseconds)."""
    redaction_grace_s: Annotated[int, msgspec.Meta(ge=0, le=30 * 86_400)] = 86_400
    """Seconds the bytes of a redacted body may stay on disk (free pages, WAL, search index segments) before they
    are scrubbed; answers hide it at once. 0 for an emergency: scrubbed at once (docs/operations.md, "Redaction")."""
    retain_delivered_notifications_days: Annotated[int, msgspec.Meta(ge=0, le=36_500)] = 0
    """Delete notifications delivered more than this many days ago (node-local; 0: keep them all, the default;
    docs/operations.md, "Retention")."""
    retain_rejected_candidates_days: Annotated[int, msgspec.Meta(ge=0, le=36_500)] = 0
    """Delete default-mode candidates rejected more than this many days ago (node-local; 0: keep them all)."""
    push_allowlist: Annotated[str, msgspec.Meta(max_length=4096)] = ""
    """Comma-separated URL prefixes push endpoints must start with (e.g. `http://10.0.0.,http://127.0.0.1:`);
    empty: any http(s) URL but the node's own origins and its peers'."""


FIELDS: tuple[str, ...] = Config.__struct_fields__


def _check(raw: Mapping[str, Any], source: str, *, strict: bool) -> dict[str, Any]:
    """Validate one source's partial settings; return them unchanged if valid."""
    try:
        msgspec.convert(dict(raw), Config, strict=strict)
    except msgspec.ValidationError as exc:
        message, path = split_validation_error(exc)
        key = path[2:] if path.startswith("$.") else ""  # the settings are flat: "$.port" is the key port
        if message.startswith("Object contains unknown field `"):
            message = "unknown key"
        raise ConfigError(f"{source}: {key}: {message}" if key else f"{source}: {message}") from None
    return dict(raw)


def from_file(path: Path) -> dict[str, Any]:
    """Settings from a TOML file (flat keys); a missing or unreadable file is an error."""
    try:
        text = path.read_text("utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {path} cannot be read: {exc}") from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    for key, value in raw.items():
        if isinstance(value, dict):
            raise ConfigError(f"{path}: {key}: tables are not used; write the keys at the top level")
    return _check(raw, str(path), strict=True)


def from_env(environ: Mapping[str, str]) -> dict[str, Any]:
    """Settings from BBS_* environment variables named after known fields (values are parsed as text)."""
    raw: dict[str, Any] = {}
    for name in FIELDS:
        value = environ.get(ENV_PREFIX + name.upper())
        if value is not None:
            raw[name] = value
    for name, value in raw.items():
        # Each variable is validated alone so the error names the variable, not the field.
        _check({name: value}, f"environment {ENV_PREFIX}{name.upper()}", strict=False)
    return raw


def load(
    file: Path | None = None,
    flags: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Config:
    """The effective configuration: defaults < file < environment < flags (flags that are None are unset)."""
    merged: dict[str, Any] = {}
    if file is not None:
        merged.update(from_file(file))
    merged.update(from_env(os.environ if environ is None else environ))
    given = {k: v for k, v in (flags or {}).items() if v is not None}
    merged.update(_check(given, "command line", strict=False))
    try:
        return msgspec.convert(merged, Config, strict=False)
    except msgspec.ValidationError as exc:  # pragma: no cover - every source was checked above
        raise ConfigError(str(exc)) from None


def to_toml(config: Config) -> str:
    """The configuration as TOML (for `bbs serve --print-config`)."""
    lines = []
    for name in FIELDS:
        value = getattr(config, name)
        if value is None:
            continue
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, str):
            text = msgspec.json.encode(value).decode()
        else:
            text = repr(value)
        lines.append(f"{name} = {text}")
    return "\n".join(lines) + "\n"
