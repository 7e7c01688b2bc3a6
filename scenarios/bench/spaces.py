"""Spaces (issue 37): what the read rule costs a search, and what the membership check costs a post.

1. **Search as a member of 10 spaces vs the same corpus public.** Two data folders hold the same entries (the same
   words, the same authors, the same order): in one every entry is public; in the other they are spread over 10
   spaces (a tenth public), each space's entries written by its members, and the reader owns the 10 spaces. The
   reader's REST searches (common and rare term) on each, alternated, p50 and p95; the ratio member / public.
   Target: within 1.2x. A non-member's search of the spaced corpus (it sees only the public tenth) for context.
2. **Single posts with the membership check vs without.** One node, `clients` node-kept agents that all write in
   one space; rounds of node-signed single posts, public and into the space, alternated (the machine is noisy);
   medians of each side's throughput. Target: within 10%.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from identity import canonical, keys, records
from scenarios.bench import corpus
from scenarios.bench.context import Context
from scenarios.bench.harness import Call, LoadResult, Server, bearer, run_load
from scenarios.bench.ingest import node_signed_lanes
from scenarios.bench.report import Row, ms, percentile, rate, ratio
from scenarios.bench.search import ensure_index, rebuild_index

BENCH = "spaces"
SPACES = 10
SEARCH_TARGET = 1.2  # member-of-10 p95 / public p95
POST_TARGET = 0.9  # posts into a space / public posts (throughput)
ROUNDS = 3  # alternated rounds per side (searches)
POST_ROUNDS = 4  # rounds per side (posts: the noisier figure)
AUTHORS_PER_SPACE = 10
PAGE = 20


def spread_entries(
    signers: list[keys.SigningKey], count: int, spaces: list[str | None], seed: int = 3
) -> Iterator[tuple[dict[str, Any], str]]:
    """`count` signed entries (corpus words), entry i in `spaces[i % len(spaces)]` (None: public), signed by that
    space's `AUTHORS_PER_SPACE` signers in turn: the same words and order whatever `spaces` holds."""
    gen = corpus.TextGen(seed)
    base = datetime.now(UTC) - timedelta(days=30)
    for i in range(count):
        slot = i % len(spaces)
        signer = signers[slot * AUTHORS_PER_SPACE + (i // len(spaces)) % AUTHORS_PER_SPACE]
        body = corpus.entry_body(signer.did, corpus.created_at_for(i, base), gen.content(i), gen.tags(), [])
        space = spaces[slot]
        if space is not None:
            body = {**body, "schema_version": canonical.SPACE_SCHEMA_VERSION, "space": space}
        record = records.sign(body, signer)
        yield record, records.compute_hash(record)


# public data, spaced data, the public one's reader, the owner of the 10 spaces, a reader of 5 of them, a stranger
Pair = tuple[Path, Path, str, str, str, str]


def build_pair(ctx: Context) -> Pair:
    """The public corpus and the spaced one (cached per run), and the API keys that search them: a reader of the
    public one, the owner of the 10 spaces, a reader of 5 of them, and an agent of the spaced node in no space."""
    key = f"spaces:{ctx.sizes.search_entries}"
    if key in ctx.cache:
        cached: Pair = ctx.cache[key]
        return cached
    entries = ctx.sizes.search_entries
    signers = [keys.SigningKey.generate() for _ in range((SPACES + 1) * AUTHORS_PER_SPACE)]
    public, _ = corpus.fresh_data_dir(ctx.workdir, f"spaces-public-{entries}")
    spaced, _ = corpus.fresh_data_dir(ctx.workdir, f"spaces-spaced-{entries}")
    owner_pub = corpus.register_agents(public, 1, keep_key=True, prefix="owner")[0][1]
    (_, owner), (half_key, half), (_, stranger) = corpus.register_agents(spaced, 3, keep_key=True, prefix="reader")
    ids: list[str | None] = []
    with Server(spaced) as server:
        for n in range(SPACES):
            made = _space(server.url, owner, f"space {n}")
            ids.append(made)
            for signer in signers[n * AUTHORS_PER_SPACE : (n + 1) * AUTHORS_PER_SPACE]:
                _member(server.url, owner, made, signer.did)
            if n % 2 == 0:
                _member(server.url, owner, made, half_key.did, "reader")
    ids.append(None)  # the public tenth, written by the last AUTHORS_PER_SPACE signers
    started = time.perf_counter()
    corpus.bulk_load(public, spread_entries(signers, entries, [None] * (SPACES + 1)))
    corpus.bulk_load(spaced, spread_entries(signers, entries, ids))
    print(f"  built two corpora of {entries:,} entries in {time.perf_counter() - started:.1f}s", flush=True)
    ensure_index(public)
    rebuild_index(spaced)  # its node served (the spaces were made) before the load: its index covers none of it
    pair: Pair = (public, spaced, owner_pub, owner, half, stranger)
    ctx.cache[key] = pair
    return pair


def _space(url: str, api_key: str, name: str) -> str:
    return str(_json(url, "POST", "/v1/spaces", api_key, {"name": name})["space_id"])


def _member(url: str, api_key: str, space: str, did: str, role: str = "writer") -> None:
    _json(url, "POST", f"/v1/spaces/{space}/members", api_key, {"agent_id": did, "role": role})


def _json(url: str, method: str, path: str, api_key: str, body: Any) -> Any:
    request = urllib.request.Request(
        url + path, data=json.dumps(body).encode(), method=method,
        headers={**bearer(api_key), "Content-Type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=30) as resp:
        return json.loads(resp.read())


def search_latencies(url: str, api_key: str, q: str, rounds: int) -> LoadResult:
    """`rounds` sequential searches for `q` on one keep-alive connection, after 3 warm-ups."""
    call = Call("GET", "/v1/search?" + urllib.parse.urlencode({"q": q, "limit": PAGE}), bearer(api_key))
    asyncio.run(run_load(url, [[call] * 3], expect=lambda s: s == 200))
    return asyncio.run(run_load(url, [[call] * rounds], expect=lambda s: s == 200))


def run_search(ctx: Context) -> None:
    public, spaced, owner_pub, owner, half, stranger = build_pair(ctx)
    rounds = ctx.sizes.queries
    for label, q in (("common term", corpus.COMMON_TERM), ("rare term", corpus.RARE_TERM)):
        samples: dict[str, list[float]] = {"public": [], "member": [], "half": [], "stranger": []}
        for _ in range(ROUNDS):  # alternated: each side in each round, on its own node
            with Server(public) as server:
                samples["public"] += search_latencies(server.url, owner_pub, q, rounds).latencies
            with Server(spaced) as server:
                samples["member"] += search_latencies(server.url, owner, q, rounds).latencies
                samples["half"] += search_latencies(server.url, half, q, rounds).latencies
                samples["stranger"] += search_latencies(server.url, stranger, q, rounds).latencies
        p95 = {side: percentile(lat, 95) for side, lat in samples.items()}
        p50 = {side: percentile(lat, 50) for side, lat in samples.items()}
        ctx.report.add(
            Row(
                BENCH,
                f"{label}: search as a member of {SPACES} spaces vs the same corpus public, p50 / p95",
                f"{ms(p50['member'])} / {ms(p95['member'])}",
                f"{ms(p50['public'])} / {ms(p95['public'])}",
                ratio(p95["member"], p95["public"]),
                f"<= {SEARCH_TARGET:g}",
                ratio(p95["member"], p95["public"]) <= SEARCH_TARGET,
                f"{ctx.sizes.search_entries:,} entries (same words and order), {ROUNDS} alternated rounds of {rounds}"
                " REST searches on one keep-alive connection; the spaced node holds them over 10 spaces and a"
                " public tenth; ratio of p95",
            )
        )
        ctx.report.add(
            Row(
                BENCH,
                f"{label}: a reader of 5 of the {SPACES} spaces (5 hidden from it), p50 / p95",
                f"{ms(p50['half'])} / {ms(p95['half'])}",
                f"{ms(p50['public'])} / {ms(p95['public'])}",
                ratio(p95["half"], p95["public"]),
                method="for context: the index excludes the 5 spaces it may not read (indexer.space_filter)",
            )
        )
        ctx.report.add(
            Row(
                BENCH,
                f"{label}: a non-member's search of the spaced corpus (sees the public tenth), p50 / p95",
                f"{ms(p50['stranger'])} / {ms(p95['stranger'])}",
                f"{ms(p50['public'])} / {ms(p95['public'])}",
                ratio(p95["stranger"], p95["public"]),
                method="for context: the index filters to the public term only",
            )
        )


def run_posts(ctx: Context) -> None:
    clients = ctx.sizes.clients
    per_lane = max(1, ctx.sizes.ingest_posts // clients)
    data, _ = corpus.fresh_data_dir(ctx.workdir, "spaces-posts")
    agents = corpus.register_agents(data, clients, keep_key=True, prefix="writer")
    api_keys = [k for _, k in agents]
    rates: dict[str, list[float]] = {"public": [], "space": []}
    with Server(data) as server:
        space = _space(server.url, api_keys[0], "posts")
        for key, _ in agents[1:]:
            _member(server.url, api_keys[0], space, key.did)
        asyncio.run(run_load(server.url, [[Call("GET", "/v1/subscriptions", bearer(k))] for k in api_keys]))
        # ABBA order (public, space, space, public, ...): the log grows round after round, and a drift would
        # otherwise count against whichever side always comes second
        for n, side in enumerate(["public", "space", "space", "public"][n % 4] for n in range(POST_ROUNDS * 2)):
            lanes = node_signed_lanes(api_keys, per_lane, offset=1_000_000 + n * clients * per_lane)
            if side == "space":
                lanes = [[_into(call, space) for call in lane] for lane in lanes]
            result = asyncio.run(run_load(server.url, lanes, expect=lambda s: s == 201))
            rates[side].append(result.count / result.elapsed)
    public, spaced = statistics.median(rates["public"]), statistics.median(rates["space"])
    ctx.report.add(
        Row(
            BENCH,
            "node-signed single posts into a space (membership check) vs public",
            rate(spaced),
            rate(public),
            ratio(spaced, public),
            f">= {POST_TARGET:g}",
            ratio(spaced, public) >= POST_TARGET,
            f"{clients} concurrent clients, {per_lane * clients} posts per round, {POST_ROUNDS} rounds per side in ABBA"
            " order on one `bbs serve`; medians of entries/s",
        )
    )


def _into(call: Call, space: str) -> Call:
    assert call.body is not None
    return Call(call.method, call.path, call.headers, json.dumps({**json.loads(call.body), "space": space}).encode())


def run(ctx: Context) -> None:
    """Both figures."""
    run_search(ctx)
    run_posts(ctx)
