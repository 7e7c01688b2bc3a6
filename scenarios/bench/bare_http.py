"""A bare aiohttp server: one handler answering a small JSON body, no middleware and no node code.

What any aiohttp route costs on this machine before a node adds anything. The search benchmark times it with
the same client and the same request as the node's `GET /healthz`, in its own process as the node is
(`python -m scenarios.bench.bare_http PORT`).
"""

from __future__ import annotations

import subprocess
import sys
from types import TracebackType

from aiohttp import web

from scenarios.bench.harness import free_port, stop_process, wait_healthy

BODY = b'{"status":"ok"}'


async def healthz(request: web.Request) -> web.Response:
    return web.Response(body=BODY, content_type="application/json")


def app() -> web.Application:
    """The whole application: one route."""
    application = web.Application()
    application.router.add_get("/healthz", healthz)
    return application


class BareServer:
    """This module's server as a subprocess on a free loopback port."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> BareServer:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "scenarios.bench.bare_http", str(self.port)], stdout=subprocess.DEVNULL
        )
        try:
            wait_healthy(self.proc, self.url, 30.0, "the bare aiohttp server")
        except BaseException:
            stop_process(self.proc)
            raise
        return self

    def __exit__(self, *exc: object | TracebackType) -> None:
        if self.proc is not None:
            stop_process(self.proc)


if __name__ == "__main__":
    web.run_app(app(), host="127.0.0.1", port=int(sys.argv[1]), access_log=None, print=None)
