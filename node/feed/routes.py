"""REST route of the feed (GET /v1/feed): entries in arrival order after a cursor, long-polling. See
node/feed/service.py."""

from __future__ import annotations

from aiohttp import web

from node.web.appkeys import NODE
from node.web.auth import agent_id
from node.web.http import Route, decode_query, json_response
from wire.feed import FeedPage, FeedQuery


async def get_feed(request: web.Request) -> web.Response:
    return json_response(await request.app[NODE].feed.page(decode_query(request, FeedQuery), agent_id(request)))


def install(app: web.Application) -> None:
    """Wake waiting feed requests when the app shuts down, so a long-poll never holds up a graceful stop."""

    async def wake(app: web.Application) -> None:
        app[NODE].feed.closing.set()
        app[NODE].feed.wake()

    async def reset(app: web.Application) -> None:
        app[NODE].feed.closing.clear()

    app.on_startup.append(reset)
    app.on_shutdown.append(wake)


ROUTES: list[Route] = [
    Route(
        "GET",
        "/v1/feed",
        get_feed,
        "Entries in arrival order after a cursor (`next`), long-polling up to wait_ms for a new one",
        "agent",
        query=FeedQuery,
        responses={200: FeedPage},
    ),
]
