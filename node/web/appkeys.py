"""Typed keys for objects stored on the aiohttp application: every AppKey of the node, in one place.

A key names its value's type at runtime (aiohttp only shows it in the key's repr) when that type's module does
not read keys itself; the others name their type for the type checker alone, so this module imports none of
the modules that read keys and every module can import it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from node.web.limits import RateLimit

if TYPE_CHECKING:
    from node.federation.routes import SyncSettings, SyncState
    from node.ops.logging_setup import RequestObserver
    from node.ops.metrics import Metrics
    from node.push.routes import PushHolder
    from node.push.sender import PushSettings
    from node.search_index.indexer import Indexer
    from node.service import Node

NODE: web.AppKey[Node] = web.AppKey("node")
LIMIT: web.AppKey[RateLimit] = web.AppKey("rate_limit", RateLimit)
METRICS: web.AppKey[Metrics] = web.AppKey("metrics")
# On the side listener of `metrics.serve_separately`: the main app whose metrics its /metrics reports.
METRICS_SOURCE: web.AppKey[web.Application] = web.AppKey("metrics_source", web.Application)
# Told about every request once it is answered: (method, route pattern, status, seconds). node.ops.metrics installs one.
REQUEST_OBSERVER: web.AppKey[RequestObserver] = web.AppKey("request_observer")
SYNC: web.AppKey[SyncState] = web.AppKey("sync")
SYNC_SETTINGS: web.AppKey[SyncSettings] = web.AppKey("sync_settings")
# NLIP push (node/push/routes.py): the running dispatcher's holder, and the settings `bbs serve` gives it.
PUSH: web.AppKey[PushHolder] = web.AppKey("push")
PUSH_SETTINGS: web.AppKey[PushSettings] = web.AppKey("push_settings")
# The task keeping the search index caught up (node.web.background.search_indexing), when the node has an index.
SEARCH_INDEXER: web.AppKey[Indexer] = web.AppKey("search_indexer")
