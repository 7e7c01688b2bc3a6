"""Sign N nostr events (aionostr, secp256k1 Schnorr) and publish them to a relay over C websockets.

Run with the nostr-relay virtualenv's python: `python nostr_ingest.py URL N CLIENTS CONTENT_FILE`.
Prints one JSON object: count, accepted, elapsed, latencies (seconds), sign_seconds.
"""

import asyncio
import json
import secrets
import sys
import time

import websockets
from aionostr.event import Event
from coincurve import PrivateKey


def make_events(n: int, clients: int, contents: list[str]) -> list[list[str]]:
    keys = [secrets.token_hex(32) for _ in range(clients)]
    pubs = [PrivateKey(bytes.fromhex(k)).public_key_xonly.format().hex() for k in keys]
    lanes: list[list[str]] = [[] for _ in range(clients)]
    now = int(time.time())
    for i in range(n):
        lane = i % clients
        event = Event(pubkey=pubs[lane], content=contents[i % len(contents)] + f" #{i}", created_at=now, kind=1)
        event.sign(keys[lane])
        lanes[lane].append(event.to_message())
    return lanes


async def publish(url: str, lanes: list[list[str]]) -> tuple[int, float, list[float]]:
    latencies: list[float] = []
    accepted = 0

    async def lane(messages: list[str]) -> None:
        nonlocal accepted
        async with websockets.connect(url, max_size=None) as ws:
            for message in messages:
                started = time.perf_counter()
                await ws.send(message)
                while True:
                    reply = json.loads(await ws.recv())
                    if reply[0] == "OK":
                        break
                latencies.append(time.perf_counter() - started)
                accepted += bool(reply[2])

    started = time.perf_counter()
    await asyncio.gather(*(lane(m) for m in lanes))
    return accepted, time.perf_counter() - started, latencies


def main() -> None:
    url, n, clients, content_file = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    with open(content_file, encoding="utf-8") as fh:
        contents = [line.rstrip("\n") for line in fh if line.strip()]
    started = time.perf_counter()
    lanes = make_events(n, clients, contents)
    sign_seconds = time.perf_counter() - started
    accepted, elapsed, latencies = asyncio.run(publish(url, lanes))
    print(
        json.dumps(
            {
                "count": n,
                "accepted": accepted,
                "elapsed": elapsed,
                "latencies": latencies,
                "sign_seconds": sign_seconds,
            }
        )
    )


if __name__ == "__main__":
    main()
