"""What every part of the `bbs` command shares, the node's subcommands and the agent side's alike."""

from __future__ import annotations


class CommandError(Exception):
    """A one-line error for the user of the `bbs` command: it exits 1 with `bbs: <message>` and changes nothing."""
