"""A receiving agent in its own process for the push tests (tests/node/push) and the push bench: a plain aiohttp
app that parses each push with nlip-sdk (wire.nlip) and checks its signature, or the nlip-server reference
app (FastAPI, served by uvicorn) with `--nlip-server`.

    python -m scenarios.bench.push_receiver --node-id DID [--status 500] [--delay 2] [--nlip-server]

Prints `PORT <n>` once listening. GET /received answers every push received so far as JSON
(`[{"path", "at", "payload"}]`, `at` a time.time() stamp), GET /stats how many messages and notifications
(listed or counted) arrived; POST /behave {"status": s, "delay": d} changes how it
answers from then on.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import time
from typing import Any

from aiohttp import web

from wire import nlip
from wire.push_auth import PushAuthError, PushVerifier

RECEIVED: list[dict[str, Any]] = []
BEHAVIOUR: dict[str, Any] = {"status": 200, "delay": 0.0}


def plain_app(node_id: str) -> web.Application:
    verifier = PushVerifier(node_id)

    async def receive(request: web.Request) -> web.Response:
        body = await request.read()
        try:
            verifier.verify(request.method, str(request.url), request.headers, body)
            nlip.push_payload(body)
        except PushAuthError as exc:
            return web.json_response({"error": exc.code}, status=401)
        except nlip.NlipError as exc:
            if b"bbs.push_test" in body:
                RECEIVED.append({"path": request.path, "at": time.time(), "payload": {"test": True}})
                return web.json_response({"ok": True})
            return web.json_response({"error": exc.code}, status=400)
        if BEHAVIOUR["delay"]:
            await asyncio.sleep(BEHAVIOUR["delay"])
        if BEHAVIOUR["status"] != 200:
            return web.json_response({"error": "told to fail"}, status=BEHAVIOUR["status"])
        RECEIVED.append({"path": request.path, "at": time.time(), "payload": json.loads(body)["content"]})
        return web.json_response({"ok": True})

    async def received(request: web.Request) -> web.Response:
        return web.json_response(RECEIVED)

    async def stats(request: web.Request) -> web.Response:
        pushes = [r["payload"] for r in RECEIVED if "notifications" in r["payload"]]
        notes = sum(len(p["notifications"]) + p.get("more", 0) for p in pushes)
        return web.json_response({"messages": len(pushes), "notifications": notes})

    async def behave(request: web.Request) -> web.Response:
        BEHAVIOUR.update(await request.json())
        return web.json_response(BEHAVIOUR)

    app = web.Application()
    app.router.add_get("/received", received)
    app.router.add_get("/stats", stats)
    app.router.add_post("/behave", behave)
    app.router.add_post("/{tail:.*}", receive)
    return app


def serve_nlip_server(sock: socket.socket) -> None:
    """The nlip-server reference app: its session records each message it executes."""
    import uvicorn
    from nlip_sdk.nlip import NLIP_Factory, NLIP_Message
    from nlip_server.server import NLIP_Session, SafeApplication, setup_server

    class Session(NLIP_Session):
        async def execute(self, msg: NLIP_Message) -> NLIP_Message:
            RECEIVED.append({"path": "/nlip/", "at": time.time(), "payload": msg.content})
            return NLIP_Factory.create_text("received")

    class Receiver(SafeApplication):
        def create_session(self) -> NLIP_Session:
            return Session()

    app = setup_server(Receiver())

    @app.get("/received")
    async def received():  # type: ignore[no-untyped-def]  # (FastAPI reads annotations; these would be strings)
        return RECEIVED

    config = uvicorn.Config(app, log_level="warning")
    asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--node-id", required=True)
    parser.add_argument("--status", type=int, default=200)
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--nlip-server", action="store_true")
    args = parser.parse_args()
    BEHAVIOUR.update(status=args.status, delay=args.delay)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    if args.nlip_server:
        serve_nlip_server(sock)
    else:
        web.run_app(plain_app(args.node_id), sock=sock, print=None, access_log=None)


if __name__ == "__main__":
    main()
