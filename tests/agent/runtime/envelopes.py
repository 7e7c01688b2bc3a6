"""A notification envelope as the node's inbox returns it, for the scorer and tier tests."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from wire.api import Envelope

NOW = 1_700_000_000.0
OWN = "a" * 64


def env(nid: int = 1, **fields: Any) -> Envelope:
    base: dict[str, Any] = {
        "notification_id": nid,
        "entry_id": nid,
        "record_hash": f"{nid:064x}",
        "author": "did:key:zAuthor",
        "created_at": datetime.fromtimestamp(NOW, UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z"),
        "entry_type": "finding",
        "performative": "inform",
        "tags": [],
        "confidence": 0.5,
        "directed_to_me": False,
        "link_targets": [],
        "tier": 2,
        "reason": "subscription",
        "attempt": 1,
    }
    return Envelope(**{**base, **fields})
