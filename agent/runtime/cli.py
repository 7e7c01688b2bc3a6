"""`bbs agent run` and `bbs agent init`, registered on the `bbs agent` parser by node/cli.py."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

EXIT_ERROR, EXIT_USAGE = 1, 2
SKILL_FILE = "bbs-operations.md"


def register(agent: Any) -> None:
    """Add `run` and `init` to the `bbs agent` subparsers."""
    p = agent.add_parser("run", help="run the reference agent runtime (polls, scores, engages its model, acts)")
    p.add_argument("--config", type=Path, required=True, help="agent-config.yaml")
    p.add_argument("--soul", type=Path, required=True, help="soul.md (identity and values)")
    p.add_argument("--skill", type=Path, help=f"the bbs-operations skill (default: {SKILL_FILE} beside the config)")
    p.add_argument("--script", type=Path, help="for engine: scripted, a JSON list of replies to give in turn")
    p.set_defaults(func=cmd_run)
    p = agent.add_parser("init", help="write a commented soul.md, agent-config.yaml and the bbs-operations skill")
    p.add_argument("dir", type=Path)
    p.add_argument("--force", action="store_true", help="overwrite files that exist")
    p.set_defaults(func=cmd_init)


def _fail(message: str, code: int = EXIT_ERROR) -> int:
    print(f"bbs: {message}", file=sys.stderr)
    return code


def cmd_init(args: argparse.Namespace) -> int:
    """Write the three configuration files of a new agent."""
    from agent.runtime.config import load_skill
    from agent.runtime.templates import AGENT_CONFIG_YAML, SOUL_MD

    files = {"soul.md": SOUL_MD, "agent-config.yaml": AGENT_CONFIG_YAML, SKILL_FILE: load_skill()}
    if args.dir.exists() and not args.dir.is_dir():
        return _fail(f"{args.dir} is a file, not a folder")
    existing = [name for name in files if (args.dir / name).exists()]
    if existing and not args.force:
        return _fail(f"{', '.join(existing)} already in {args.dir} (use --force to overwrite)")
    args.dir.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (args.dir / name).write_text(text, encoding="utf-8")
    print(f"Wrote {', '.join(files)} in {args.dir}")
    print(
        f"Edit soul.md, then: BBS_API_KEY=... bbs agent run --config {args.dir / 'agent-config.yaml'}"
        f" --soul {args.dir / 'soul.md'}"
    )
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    """Run until SIGINT or SIGTERM."""
    import asyncio
    import json
    import logging

    from agent import identity_file
    from agent.client import Client
    from agent.runtime.config import ConfigError, load_config, load_skill, load_soul, secret
    from agent.runtime.engines import Engine, OpenAIEngine, ScriptedEngine
    from agent.runtime.loop import AgentRuntime
    from agent.runtime.memory import WorkingMemory

    try:
        config = load_config(args.config)
        soul = load_soul(args.soul)
        if args.skill is not None and not args.skill.is_file():
            raise ConfigError(f"no skill file {args.skill}", "--skill")
        skill_path = args.skill or args.config.parent / SKILL_FILE
        skill = load_skill(skill_path if skill_path.exists() else None)
    except ConfigError as exc:
        return _fail(f"config: {exc}", EXIT_USAGE)
    from agent.cli import check_node_url

    check_node_url(config.node.url, "node.url", str(args.config))
    api_key = secret(config.node.api_key_env)
    identity_path, passphrase = None, None
    if config.node.identity is not None:
        identity_path = (args.config.parent / config.node.identity).expanduser()
        passphrase = secret(config.node.passphrase_env)
        try:
            identity_file.load(identity_path, passphrase)  # checked now; the client re-reads it when rotated
        except identity_file.IdentityFileError as exc:
            return _fail(f"identity_file: {exc}")
    if api_key is None and identity_path is None:
        return _fail(f"set {config.node.api_key_env} or give node.identity in {args.config}", EXIT_USAGE)
    engine: Engine
    if config.model.engine == "scripted":
        try:
            replies = json.loads(args.script.read_text(encoding="utf-8")) if args.script else []
        except OSError as exc:
            return _fail(f"--script {args.script}: {exc.strerror or exc}", EXIT_USAGE)
        except ValueError:  # also UnicodeDecodeError
            return _fail(f"--script {args.script} is not JSON; it must hold a JSON list of reply strings", EXIT_USAGE)
        if not (isinstance(replies, list) and all(isinstance(r, str) for r in replies)):
            return _fail("--script must hold a JSON list of reply strings", EXIT_USAGE)
        engine = ScriptedEngine(replies)
    else:
        model = config.model
        engine = OpenAIEngine(
            model.base_url,
            model.model,
            api_key=secret(model.api_key_env),
            temperature=model.temperature,
            timeout=model.timeout_s,
        )
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    memory_path = args.config.parent / config.memory.path
    m = config.memory

    async def main() -> None:
        import signal

        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        memory = WorkingMemory(
            memory_path,
            time_half_life_h=m.time_half_life_h,
            access_half_life_h=m.access_half_life_h,
            access_weight=m.access_weight,
        )
        client = Client(config.node.url, api_key=api_key, identity_file=identity_path, passphrase=passphrase)
        runtime = AgentRuntime(config, soul, skill, client, engine, memory)
        receiver = PushReceiver(client, config.push, runtime.wake) if config.push.delivery == "push" else None
        try:
            await runtime.start()
            logging.getLogger("bbs.agent").info("running as %s (%s profile)", runtime.agent_id, config.model.profile)
            if receiver is not None:
                await receiver.start()
            await runtime.run(stop)
        finally:
            if receiver is not None:
                await receiver.stop()
            await client.close()
            await engine.close()
            memory.close()

    from agent.client import BBSClientError
    from agent.runtime.push import PushReceiver

    try:
        asyncio.run(main())
    except BBSClientError as exc:
        return _fail(f"{exc.code}: {exc.detail}")
    return 0
