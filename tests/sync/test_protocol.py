"""sync.protocol: the version spoken with each peer. A peer that answers 422 unsupported_sync_version is spoken to in
v2, and in v3 again once its GET /v1/node lists it (looked at every VERSION_RECHECK_S); the cursor's upgrade is
tested in tests/sync/test_too_new.py and, with the real v2 release, in tests/sync/test_v2_upgrade.py."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from identity import keys
from sync.client import SyncError, spoken_versions
from sync.protocol import VERSION_RECHECK_S
from sync.store import PeerConfig


class V2Peer:
    """A peer answering as the last v2 release does: 422 unsupported_sync_version (in that release's words) to
    another version, an empty feed to v2; its GET /v1/node lists `sync_versions` once `upgraded`."""

    def __init__(self) -> None:
        self.key = keys.SigningKey.generate()
        self.upgraded = False
        self.asked: list[str] = []
        self.server: TestServer | None = None

    async def start(self) -> None:
        async def changes(request: web.Request) -> web.Response:
            v = request.query.get("v", "1")
            self.asked.append(v)
            if v != "2" and not (self.upgraded and v == "3"):
                return web.json_response(
                    {"type": "about:blank", "title": "Unprocessable", "status": 422, "code": "unsupported_sync_version",
                     "field": "$.v", "detail": f"this node speaks sync protocol v2, not v{v}: upgrade both nodes"},
                    status=422,
                    content_type="application/problem+json",
                )  # fmt: skip
            return web.json_response(
                {"type": "changes", "v": int(v), "node_id": self.key.did, "epoch": "ab" * 16, "head": 0, "next": 0,
                 "more": False, "items": []}
            )  # fmt: skip

        async def node(request: web.Request) -> web.Response:
            info: dict[str, Any] = {"node_id": self.key.did, "boot_id": "b" * 16}
            if self.upgraded:
                info["sync_versions"] = [2, 3]
            return web.json_response(info)

        app = web.Application()
        app.router.add_get("/v1/sync/changes", changes)
        app.router.add_get("/v1/node", node)
        self.server = TestServer(app, host="127.0.0.1")
        await self.server.start_server()

    @property
    def config(self) -> PeerConfig:
        assert self.server is not None
        return PeerConfig(self.key.did, str(self.server.make_url("")).rstrip("/"))


async def test_a_v2_peer_is_spoken_to_in_v2_and_in_v3_once_it_lists_it(make_peer: Any) -> None:
    old = V2Peer()
    await old.start()
    try:
        b = await make_peer("b")
        async with b.session.post(
            b.url + "/v1/peers", json={"url": old.config.url, "node_id": old.key.did}, headers=b.admin
        ) as resp:
            assert resp.status == 201
        now = [1000.0]
        puller = b.puller(clock=lambda: now[0])
        with pytest.raises(SyncError) as refused:
            await puller.pull_once(old.config)
        assert refused.value.code == "unsupported_sync_version"
        assert puller.versions.fall_back(old.config, refused.value) is True
        assert puller.versions.fall_back(old.config, refused.value) is False  # v2 already
        await puller.pull_once(old.config)
        assert old.asked == ["3", "2"] and puller.versions.version_of(old.key.did) == 2
        (status,) = await b.sync.store.statuses()
        assert status.sync_version == 2 and status.last_error is None
        now[0] += VERSION_RECHECK_S - 1
        assert await puller.versions.recheck(old.config) is False  # not looked at again so soon
        now[0] += 2
        assert await puller.versions.recheck(old.config) is False  # looked at: it lists no v3 yet
        old.upgraded = True
        now[0] += VERSION_RECHECK_S - 1
        assert await puller.versions.recheck(old.config) is False
        now[0] += 2
        assert await puller.versions.recheck(old.config) is True
        await puller.pull_once(old.config)
        assert old.asked[-1] == "3" and puller.versions.version_of(old.key.did) == 3
        (status,) = await b.sync.store.statuses()
        assert status.sync_version == 3
    finally:
        assert old.server is not None
        await old.server.close()


def test_the_v2_release_s_refusal_names_its_version() -> None:
    assert spoken_versions("this node speaks sync protocol v2, not v3: upgrade both nodes") == {2}
    assert spoken_versions("this node speaks sync protocol v4 and v3, not v2: upgrade the older node") == {3, 4}
    assert spoken_versions("something else") == set() == spoken_versions(None)
