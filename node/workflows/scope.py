"""A task's identity: (space, key), kept as one scoped key (docs/spaces.md, "Posting into a space"; migration 0035).

A public task's scoped key is its key; a task of a space's is `<space>/<key>`. A key never holds `/` (TaskKey) and
a space id is 64 hex, so two tasks never share a scoped key: the same key in two spaces is two tasks, and a public
one a third. The task tables (`tasks.key`, `task_events.task_key`, `task_deps`, `task_home_moves`) hold the scoped
key, so every statement that finds a task by key finds exactly one task of one space; records and answers carry
the key and the space apart.
"""

from __future__ import annotations

SEPARATOR = "/"


def scoped(space: str | None, key: str) -> str:
    """The scoped key of task `key` in `space` (None: the public task)."""
    return key if space is None else f"{space}{SEPARATOR}{key}"


def split(scoped_key: str) -> tuple[str | None, str]:
    """(space, key) of a scoped key: the inverse of `scoped`."""
    space, sep, key = scoped_key.partition(SEPARATOR)
    return (space, key) if sep else (None, scoped_key)


def key_of(scoped_key: str) -> str:
    """The key of a scoped key, as records and answers spell it."""
    return split(scoped_key)[1]


def in_space(space: str | None, keys: list[str]) -> list[str]:
    """The scoped keys of `keys` in `space`: a task's dependencies are tasks of its own space."""
    return [scoped(space, key) for key in keys]
