"""API fuzzing: schemathesis against a real `bbs serve` and its own /openapi.json, with a real agent key.

Every operation in the document gets generated requests (positive and negative, the coverage and
fuzzing phases), checked with `not_a_server_error`, `response_schema_conformance`,
`content_type_conformance` and `negative_data_rejection`. The run fails on any failure or error, or if
fewer cases than asked for were generated.

    python -m scenarios.fuzz [--examples 100]   # the long form
    tests/hardening/test_fuzz.py                 # the CI form (a few examples per operation, >1,000 cases)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from scenarios.fednet import ScenarioFailed, ServedNode

CHECKS = "not_a_server_error,response_schema_conformance,content_type_conformance,negative_data_rejection"


@dataclass
class FuzzReport:
    """What a run did, from schemathesis's JSON report."""

    cases: int
    operations: int
    failures: int
    errors: int
    output: str
    raw: dict[str, Any]


def fuzz(base_url: str, api_key: str, examples: int, report_path: Path, seed: int | None = None) -> FuzzReport:
    """Run the schemathesis CLI over every operation of `base_url`/openapi.json and read its report."""
    command = [
        sys.executable, "-m", "schemathesis.cli", "run", base_url + "/openapi.json",
        "--checks", CHECKS,
        "--header", f"Authorization: Bearer {api_key}",
        "--max-examples", str(examples),
        "--phases", "examples,coverage,fuzzing",
        "--mode", "all",
        "--continue-on-failure",
        "--request-timeout", "30",
        "--workers", "1",
        "--generation-database", "none",
        "--report", "json", "--report-json-path", str(report_path),
        "--no-color",
    ]  # fmt: skip
    if seed is not None:
        command += ["--seed", str(seed)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=3600, check=False)
    if not report_path.exists():
        raise ScenarioFailed(f"schemathesis wrote no report ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    raw = json.loads(report_path.read_text("utf-8"))
    cases = raw["test_cases"]
    return FuzzReport(
        cases=int(cases["generated"]),
        operations=_tested(done.stdout),
        failures=int(cases["with_failures"]),
        errors=int(cases["errored"]) + len(raw.get("errors") or []),
        output=done.stdout + done.stderr,
        raw=raw,
    )


def _tested(output: str) -> int:
    for line in output.splitlines():
        if line.strip().startswith("Tested:"):
            return int(line.split(":")[1])
    return 0


async def _start(root: Path) -> tuple[ServedNode, str]:
    node = ServedNode("fuzzed", root / "fuzzed")
    node.init()
    async with aiohttp.ClientSession() as session:
        await node.start(session)
        agent = await node.call(session, "POST", "/v1/agents", {"name": "fuzzer"})
    return node, str(agent["api_key"])


def run(root: Path, examples: int, seed: int | None = None) -> FuzzReport:
    """Start a node in `root`, fuzz it, stop it; raise ScenarioFailed on any failure or error."""
    node, api_key = asyncio.run(_start(root))
    try:
        report = fuzz(node.url, api_key, examples, root / "schemathesis.json", seed)
        if node.proc is None or node.proc.poll() is not None:
            raise ScenarioFailed("the node exited during fuzzing")
    finally:
        node.kill()
    if report.failures or report.errors or report.raw.get("exit_code") != 0:
        raise ScenarioFailed(f"{report.failures} failures, {report.errors} errors:\n{report.output[-20000:]}")
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=100, help="examples per operation (default 100)")
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bbs-fuzz-") as tmp:
        try:
            report = run(Path(tmp), args.examples, args.seed)
        except ScenarioFailed as exc:
            print(f"FAILED: {exc}", file=sys.stderr)
            return 1
    print(f"{report.cases} cases over {report.operations} operations: 0 failures, 0 errors")
    return 0


if __name__ == "__main__":
    sys.exit(main())
