"""`bbs` of this release, plus one member a later release adds to entries: `language` (optional, absent unless set).

Run as `python -m tests.sync.next_release <bbs arguments>`. It stands for a release that accepts a v3-only public
form: this branch accepts none yet on its own (the identity issue brings entries signed by a rotated key, the
waiting area key events), and a member added to a v1 kind is exactly the `agent_type` episode (docs/decisions.md):
the schemas of the last v2 release (identity/schema_v2.py) refuse it, so `sync.compat` withholds such an entry
from v2 peers. Used by tests/sync/test_v2_upgrade.py, where it runs as a real `bbs serve`.
"""

from __future__ import annotations

import sys

import msgspec

from identity import schema


class EntryRecordNext(schema.EntryRecord, forbid_unknown_fields=True):
    """An entry as the later release knows it: with an optional `language`."""

    language: str | msgspec.UnsetType = msgspec.UNSET


def main() -> int:
    """Register the later entry schema, then run `bbs` with this process's arguments."""
    schema.register_record_type("entry", EntryRecordNext)
    from node.cli import main as bbs

    return bbs(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
