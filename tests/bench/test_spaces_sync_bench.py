"""The spaces-sync benchmark's parts at a tiny size (scenarios/bench/spaces_sync.py): its spaced source holds the 10
spaces' entries federated, a host of the first space is served exactly that space and the public records, a peer
hosting none of them only the public ones, and its reconciling store lacks exactly what it says. Never asserts a
time."""

from __future__ import annotations

import asyncio
from pathlib import Path

from identity import keys
from scenarios.bench import space_gate, spaces, spaces_sync, sync
from scenarios.bench.context import Context, Sizes

PER_SPACE = 3


def test_a_host_of_one_space_is_served_that_space_and_a_stranger_only_the_public(tmp_path: Path) -> None:
    ctx = Context(Sizes.quick(), tmp_path)
    host, stranger = keys.SigningKey.generate(), keys.SigningKey.generate()
    signers = [keys.SigningKey.generate() for _ in range(spaces.SPACES * spaces.AUTHORS_PER_SPACE)]
    folder, token, space, entries = spaces_sync.build_spaced(ctx, signers, PER_SPACE, [host.did])
    assert len(entries) == spaces.SPACES * PER_SPACE and all("space" in r for r, _h in entries)
    served = spaces_sync.served_records(folder, space)
    public = spaces_sync.served_records(folder, "")
    of_space = [v for v in served if v.record.get("space") == space or v.hash == space]
    assert len(of_space) == 1 + 1 + 1 + spaces.AUTHORS_PER_SPACE + PER_SPACE  # creation, 2 hosts, writers, posts
    assert len(served) == len(public) + len(of_space)
    with sync.served_folder(folder, token, [host.did, stranger.did]) as source:
        _took, items = asyncio.run(spaces_sync.page_feed(source, host))
        assert items == len(served)
        _took, items = asyncio.run(spaces_sync.page_feed(source, stranger))
        assert items == len(public)
        posts = {h for r, h in entries if r.get("space") == space}
        held = spaces_sync.without(served, posts, 2)
        assert len(held) == len(served) - 2
        hosts = {space: frozenset({host.did, source.node_id})}
        _took, _rounds, _bytes, need = asyncio.run(spaces_sync.reconcile(held, source, host, hosts))
        assert need == 2


def test_the_space_gate_bench_stores_every_batch_of_posts(tmp_path: Path) -> None:
    """scenarios/bench/space_gate.py at a tiny size: every batch of posts is stored whole (`batch_cpu` asserts it)
    against a space of 10 and of 40 member records, and a CPU time is taken for each batch."""
    ctx = Context(Sizes.quick(), tmp_path)
    for members in (10, 40):
        took = space_gate.batch_cpu(ctx, members, batches=2, per_batch=5)
        assert len(took) == 2
