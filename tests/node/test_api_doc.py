"""docs/api.md matches the code: every core route, every stable error code and every limit it names."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

from node import errors
from node.routes import ROUTES

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "api.md").read_text("utf-8")
CORE_MODULES = [
    "service",
    "routes",
    "web/http",
    "web/auth",
    "agents/service",
    "entries/queries",
    "inbox/notify",
    "store/projections",
    "store/db",
]


def documented_codes() -> set[str]:
    return set(re.findall(r"^\| \d{3} \| `([a-z_]+)` \|", DOC, flags=re.M))


def test_every_core_route_is_documented() -> None:
    for route in ROUTES:
        assert f"{route.method} {route.path}" in DOC, f"{route.method} {route.path} is not in docs/api.md"


def test_every_error_code_raised_by_the_core_is_documented() -> None:
    raised: set[str] = set()
    for name in CORE_MODULES:
        source = (ROOT / "node" / f"{name}.py").read_text("utf-8")
        raised |= set(re.findall(r'\bcode="([a-z_]+)"', source))
    raised |= {cls.code for cls in vars(errors).values() if isinstance(cls, type) and issubclass(cls, errors.BBSError)}
    raised.discard("bad_request")  # the base class default, never raised as such
    reasons = set(re.findall(r'RecordError\(\s*"([a-z_]+)"', (ROOT / "identity" / "records.py").read_text("utf-8")))
    reasons.discard("wrong_signer")  # raised only by sign(), never for a received record
    raised |= {f"record_{r}" for r in reasons}
    raised |= {"method_not_allowed"}  # from http._HTTP_CODES
    missing = raised - documented_codes()
    assert not missing, f"codes not documented in docs/api.md: {sorted(missing)}"


def test_documented_statuses_match_the_error_classes() -> None:
    table = {code: int(status) for status, code in re.findall(r"^\| (\d{3}) \| `([a-z_]+)` \|", DOC, re.M)}
    for cls in vars(errors).values():
        if isinstance(cls, type) and issubclass(cls, errors.BBSError) and cls.code in table:
            assert table[cls.code] == cls.status, cls


def test_limits_table_matches_the_constants() -> None:
    rows = re.findall(r"^\| `([a-z_.]+)\.([A-Z_]+)` \| (\d+) \|", DOC, flags=re.M)
    assert len(rows) >= 20
    for module, name, value in rows:
        assert getattr(importlib.import_module(module), name) == int(value), f"{module}.{name} != {value}"
