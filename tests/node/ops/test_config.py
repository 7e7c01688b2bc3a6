"""Configuration: defaults < TOML file < BBS_* environment < flags; bad keys and values refused by name."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from node.ops.config import Config, ConfigError, load


def test_defaults_without_any_source() -> None:
    assert load(environ={}) == Config()


def test_precedence_file_then_env_then_flags(tmp_path: Path) -> None:
    file = tmp_path / "bbs.toml"
    file.write_text('port = 9001\nhost = "0.0.0.0"\nlog_format = "json"\nlog_level = "debug"\n')
    env = {"BBS_PORT": "9002", "BBS_LOG_LEVEL": "warning"}
    config = load(file, {"port": "9003", "host": None}, environ=env)
    assert config.port == 9003  # flag beats env beats file
    assert config.log_level == "warning"  # env beats file
    assert config.host == "0.0.0.0"  # file beats default; an unset flag (None) does not count
    assert config.log_format == "json"
    assert load(file, environ=env).port == 9002


def test_env_values_are_parsed_from_text() -> None:
    config = load(environ={"BBS_ACCESS_LOG": "false", "BBS_METRICS_PORT": "9100", "BBS_SHUTDOWN_TIMEOUT": "2.5"})
    assert (config.access_log, config.metrics_port, config.shutdown_timeout) == (False, 9100, 2.5)


def test_sync_and_mcp_settings_from_env_file_and_flags(tmp_path: Path) -> None:
    env = {"BBS_SYNC": "off", "BBS_SYNC_WAIT_MS": "1500", "BBS_RECONCILE_EVERY_S": "2", "BBS_MCP_PORT": "8421"}
    config = load(environ=env)
    assert (config.sync, config.sync_wait_ms, config.reconcile_every_s, config.mcp_port) == ("off", 1500, 2.0, 8421)
    file = tmp_path / "bbs.toml"
    file.write_text('sync = "off"\nreconcile_every_s = 60\nmcp_port = 9000\n')
    config = load(file, {"mcp_port": "9001"}, environ={})
    assert (config.sync, config.reconcile_every_s, config.mcp_port) == ("off", 60.0, 9001)
    for bad in ({"BBS_SYNC": "maybe"}, {"BBS_SYNC_WAIT_MS": "60001"}, {"BBS_RECONCILE_EVERY_S": "0"}):
        name = next(iter(bad))
        with pytest.raises(ConfigError, match=f"{name}: {name[4:].lower()}:"):
            load(environ=bad)


def test_search_fresh_timeout_from_env_and_its_bounds() -> None:
    assert Config().search_fresh_timeout_ms == 2000
    assert load(environ={"BBS_SEARCH_FRESH_TIMEOUT_MS": "0"}).search_fresh_timeout_ms == 0  # never wait
    for bad in ("-1", "60001", "soon"):
        with pytest.raises(ConfigError, match="BBS_SEARCH_FRESH_TIMEOUT_MS: search_fresh_timeout_ms:"):
            load(environ={"BBS_SEARCH_FRESH_TIMEOUT_MS": bad})


def test_unrelated_bbs_variables_are_ignored() -> None:
    assert load(environ={"BBS_URL": "http://x", "BBS_API_KEY": "secret"}) == Config()


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("prot = 8420\n", "prot"),
        ('port = "8420"\n', "port"),
        ("port = 70000\n", "port"),
        ('log_format = "xml"\n', "log_format"),
        ("shutdown_timeout = 0\n", "shutdown_timeout"),
        ("[server]\nport = 1\n", "server"),
    ],
)
def test_bad_file_keys_and_values_name_the_key(tmp_path: Path, text: str, key: str) -> None:
    file = tmp_path / "bbs.toml"
    file.write_text(text)
    with pytest.raises(ConfigError) as info:
        load(file, environ={})
    assert f"{file}: {key}:" in str(info.value)


def test_bad_env_value_names_the_variable() -> None:
    with pytest.raises(ConfigError, match="BBS_PORT: port:"):
        load(environ={"BBS_PORT": "eighty"})


def test_bad_flag_value_names_the_key() -> None:
    with pytest.raises(ConfigError, match="command line: metrics_port:"):
        load(flags={"metrics_port": "-5"}, environ={})


def test_invalid_toml_and_missing_file_are_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("port = = 1\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load(bad, environ={})
    with pytest.raises(ConfigError, match="does not exist"):
        load(tmp_path / "missing.toml", environ={})


def _bbs(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "node.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
        cwd=Path(__file__).parents[3],
    )


def test_serve_print_config_applies_all_sources(tmp_path: Path) -> None:
    file = tmp_path / "bbs.toml"
    file.write_text(f'data = "{tmp_path / "d"}"\nport = 9001\n')
    env = {"PATH": "/usr/bin:/bin", "BBS_PORT": "9002", "BBS_LOG_FORMAT": "json"}
    out = _bbs("serve", "--config", str(file), "--port", "9003", "--print-config", env=env)
    assert out.returncode == 0, out.stderr
    assert "port = 9003\n" in out.stdout and 'log_format = "json"' in out.stdout
    assert f'data = "{tmp_path / "d"}"' in out.stdout


def test_serve_refuses_missing_config_file_and_bad_flag(tmp_path: Path) -> None:
    out = _bbs("serve", "--config", str(tmp_path / "nope.toml"), "--print-config")
    assert out.returncode == 2 and "does not exist" in out.stderr
    out = _bbs("serve", "--port", "http", "--print-config")
    assert out.returncode == 2 and "port" in out.stderr


def test_sample_config_is_valid_and_matches_defaults() -> None:
    sample = Path(__file__).parents[3] / "docker" / "bbs.sample.toml"
    config = load(sample, environ={})
    assert config.port == Config().port
