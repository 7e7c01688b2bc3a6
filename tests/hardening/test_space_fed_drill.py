"""The CI forms of scenarios/space_fed.py: five real `bbs serve` nodes, three spaces with different hosts, a host
stopped and restored from an old backup, a host named late and one removed, a member removed after the backup, a
captured signed feed request replayed, an equivocating member, random kills and link cuts from the default seed;
every check it names must hold (about 35 to 55 s), all on SQLite, and again with b on PostgreSQL. Beside them, the
parts the drill's adversaries rest on: the relay tap that captures a request and the raw replay of it, and the
replay check failing on what it must refuse."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from scenarios import pg_cluster as pg_cluster_mod
from scenarios import space_fed
from scenarios.fednet import Capture, Link, send_raw


@pytest.mark.slow
async def test_the_space_federation_drill_holds_every_check(tmp_path: Path) -> None:
    report = await space_fed.run(tmp_path)
    print(report.text)
    assert set(report.results) == set(space_fed.CHECKS)
    assert not report.failed, report.text
    assert "space federation drill wall time" in report.text
    did = next(line for line in report.text.splitlines() if line.startswith("what it did: "))
    assert "restarted " in did and "mended " in did, did  # the random schedule ran: a node killed and back, a link cut
    assert "c restored from its backup (lacks 3 of 3)" in did, did  # the amnesia really lost what came after it


@pytest.mark.slow
async def test_the_space_federation_drill_holds_with_a_host_on_postgresql(
    tmp_path: Path, pg_cluster: pg_cluster_mod.Cluster
) -> None:
    """The same drill with b (a host of alpha and beta, beta's creator, the node whose feed request is replayed) a
    real `bbs serve --store postgresql://...` among SQLite nodes: every check holds, b's log read from PostgreSQL."""
    stores = {"b": pg_cluster.store_url(pg_cluster.create_database())}
    report = await space_fed.run(tmp_path, stores=stores)
    print(report.text)
    assert set(report.results) == set(space_fed.CHECKS)
    assert not report.failed, report.text
    assert report.text.startswith("b on PostgreSQL; seed 38") and not (tmp_path / "b" / "bbs.db").exists()
    with pytest.raises(ValueError):
        await space_fed.run(tmp_path / "no", stores={"c": stores["b"]})  # c's story is a SQLite backup's restore


def test_a_failed_check_stays_failed(tmp_path: Path) -> None:
    w = space_fed.World(tmp_path, session=None)  # type: ignore[arg-type]
    w.check("no_leak", True, "alpha on c: log 0")
    w.check("no_leak", False, "alpha on e: log 3")
    w.check("no_leak", True, "beta on a: log 0")
    assert w.results["no_leak"] == space_fed.Check(False, "alpha on e: log 3")
    with pytest.raises(AssertionError):
        w.check("no_such_check", True, "")


def test_the_nodes_that_never_hosted_follow_the_layout(tmp_path: Path) -> None:
    w = space_fed.World(tmp_path, session=None)  # type: ignore[arg-type]
    w.hosts = {"alpha": {"a", "b", "d"}, "beta": {"b", "c"}, "gamma": {"a", "c"}}
    assert w.never_hosted("alpha") == ["c", "e"]
    assert w.never_hosted("beta") == ["a", "d"]  # e hosted beta until its removal: it holds the earlier records
    assert w.never_hosted("gamma") == ["b", "d", "e"]


def test_the_random_schedule_follows_its_seed() -> None:
    one = space_fed.draw_schedule(space_fed.DEFAULT_SEED)
    assert one == space_fed.draw_schedule(space_fed.DEFAULT_SEED)  # CI's run is reproducible
    assert one != space_fed.draw_schedule(space_fed.DEFAULT_SEED + 1)
    assert [e.at for e in one] == sorted(e.at for e in one)
    kills = [e for e in one if e.kind == "kill"]
    cuts = [e for e in one if e.kind == "cut"]
    assert (len(kills), len(cuts)) == (space_fed.KILLS, space_fed.CUTS)
    assert all(e.nodes[0] in space_fed.KILLABLE and "c" not in e.nodes for e in kills)  # c is the story's
    assert all(len(set(e.nodes)) == 2 and set(e.nodes) <= set(space_fed.KILLABLE) for e in cuts)
    assert all(0 <= e.at <= space_fed.CHAOS_WINDOW_S and e.seconds > 0 for e in one)
    text = space_fed.schedule_text(7)
    assert text.startswith("seed 7:") and len(text.splitlines()) == 1 + space_fed.KILLS + space_fed.CUTS


async def test_the_tap_captures_one_request_on_a_kept_alive_connection_and_it_replays_as_sent(
    aiohttp_server: Callable[..., Awaitable[TestServer]],
) -> None:
    seen: list[tuple[str, bytes]] = []

    async def echo(request: web.Request) -> web.Response:
        body = await request.read()
        seen.append((request.path_qs, body))
        return web.json_response({"code": "echo", "n": len(seen)}, status=401 if body else 200)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", echo)
    server = await aiohttp_server(app)
    assert server.port is not None
    capture = Capture("/wanted?since=0&")
    link = Link(server.port, tap=capture.tap(("x", "y")))
    await link.start()
    try:
        capture.arm(("x", "y"))
        async with aiohttp.ClientSession() as session:  # one connection, kept alive across the three requests
            for path, body in (("/first", b""), ("/wanted?since=1&", b"no"), ("/wanted?since=0&", b"yes")):
                async with session.post(link.url + path, data=body) as resp:
                    await resp.read()
        capture.arm(None)
        assert capture.raw is not None
        assert capture.raw.startswith(b"POST /wanted?since=0& HTTP/1.1\r\n") and capture.raw.endswith(b"\r\n\r\nyes")
        status, body = await send_raw(link.port, capture.raw)  # the bytes as captured, through the relay again
        assert (status, body) == (401, b'{"code": "echo", "n": 4}')
        assert seen[-1] == ("/wanted?since=0&", b"yes")
    finally:
        await link.close()


async def test_the_replay_check_fails_on_an_answer_it_must_refuse(tmp_path: Path) -> None:
    refused = [space_fed.Replayed("at once", 401, "replayed_request", False)]
    refused.append(space_fed.Replayed("after the heal", 401, "stale_boot", False))
    for replays, control, holds in (
        (refused, 9, True),
        (refused, 0, False),  # the captured request's own answer held nothing of the space: a blind probe
        (refused[:1], 9, False),  # a replay that did not run
        ([refused[0], space_fed.Replayed("after the heal", 200, None, False)], 9, False),  # served again
        ([refused[0], space_fed.Replayed("after the heal", 401, "stale_boot", True)], 9, False),  # named the space
        ([refused[0], space_fed.Replayed("after the heal", 401, "bad_signature", False)], 9, False),  # another cause
    ):
        w = space_fed.World(tmp_path, session=None)  # type: ignore[arg-type]
        w.replays, w.replay_control = replays, control
        await space_fed.replays_refused(w)
        assert w.results["replay_refused"].ok is holds, (replays, control)
