"""What the stored links and subscriptions say of entries about to be appended: the columns one statement reads
before a run's rows (node/store/projections.py `_ahead`, or a caller's look-ahead: node/entries/store.py
`look_ahead_txn`), which decide the statements the run's projection can skip.

Constants only, and no import with I/O: node/default_mode's runtime imports node/entries/store.py.
"""

from __future__ import annotations

from typing import NamedTuple


class Named(NamedTuple):
    """What the stored links (and subscriptions) say of a run of arriving entries, read before its rows
    (`NAMED_SQL`)."""

    superseded: bool  # a stored `supersedes` link names one of them
    contradicted: bool  # a stored `contradicts` link names one of them (either end)
    subscribed: bool  # the node holds a subscription


# Stored links that name the arriving entries (:h, a JSON array of their hashes) and decide what they derive: the
# columns of `Named`, for `_ahead`'s statement or one that reads them beside other things (node/entries/store.py
# `look_ahead_txn`, before anything of the run is appended: the log's rows change no link).
NAMED_SQL = (
    "EXISTS (SELECT 1 FROM json_each(:h) a JOIN links x ON x.target_hash = a.value"
    "   AND x.link_type = 'supersedes'),"
    " EXISTS (SELECT 1 FROM json_each(:h) a JOIN links x ON x.target_hash = a.value AND x.link_type = 'contradicts')"
    " OR EXISTS (SELECT 1 FROM json_each(:h) a JOIN links x ON x.source_hash = a.value"
    "   AND x.link_type = 'contradicts'),"
    " EXISTS (SELECT 1 FROM subscriptions)"
)

# NAMED_SQL on PostgreSQL, where :h is an array of the hashes (record 50: `= ANY` for json_each).
NAMED_SQL_PG = (
    "EXISTS (SELECT 1 FROM links x WHERE x.target_hash = ANY(:h) AND x.link_type = 'supersedes'),"
    " EXISTS (SELECT 1 FROM links x WHERE (x.target_hash = ANY(:h) OR x.source_hash = ANY(:h))"
    "   AND x.link_type = 'contradicts'),"
    " EXISTS (SELECT 1 FROM subscriptions)"
)
