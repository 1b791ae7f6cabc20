"""A caller flooding a server with submits and attaches, as a process of its own.

`python -m tests.flood URL API_KEY EVENTS_PATH SUBMITTERS ATTACHERS [REPLAYERS]` floods until
its standard input closes, then prints `{"submits": {status: count}, "attaches": {status:
count}, "replays": {status: count}, "replayed_bytes": n}` as one line of JSON. Replayers read
EVENTS_PATH whole, again and again (a replay of a finished run's stream). A separate process,
so that the flood's own client work does not slow the measurements of the test that starts it
(`tests/test_caller_limits.py`, `TestFlood` and `TestReplayFlood`).
"""

from __future__ import annotations

import asyncio
import collections
import json
import sys

import httpx

# A flooder's run holds a worker slot for a minute while costing next to nothing.
SLOW_RUN = {
    "input": {"messages": [{"role": "user", "content": " ".join(["flood"] * 60)}]},
    "config": {"configurable": {"fake_token_delay_ms": 1000}},
}


async def flood(
    url: str, key: str, path: str, submitters: int, attachers: int, replayers: int = 0
) -> None:
    submits: collections.Counter[int] = collections.Counter()
    attaches: collections.Counter[int] = collections.Counter()
    replays: collections.Counter[int] = collections.Counter()
    replayed_bytes = 0
    stop = asyncio.Event()
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=50)
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(
        base_url=url, timeout=60, limits=limits, headers=headers
    ) as client:

        async def submit_forever() -> None:
            while not stop.is_set():
                submits[(await client.post("/v1/runs", json=SLOW_RUN)).status_code] += 1

        async def attach_forever() -> None:
            while not stop.is_set():
                request = client.build_request("GET", path)
                response = await client.send(request, stream=True)
                if not stop.is_set():  # not those that found a slot freed as the flood ended
                    attaches[response.status_code] += 1
                if response.status_code == 200:
                    await stop.wait()  # keep it open, never read it
                else:
                    await response.aread()
                await response.aclose()

        async def replay_forever() -> None:
            nonlocal replayed_bytes
            while not stop.is_set():
                async with client.stream("GET", path) as response:
                    async for chunk in response.aiter_raw():
                        replayed_bytes += len(chunk)
                replays[response.status_code] += 1

        tasks = [asyncio.create_task(submit_forever()) for _ in range(submitters)]
        tasks += [asyncio.create_task(attach_forever()) for _ in range(attachers)]
        tasks += [asyncio.create_task(replay_forever()) for _ in range(replayers)]
        stdin = asyncio.StreamReader()
        loop = asyncio.get_running_loop()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
        await stdin.read()  # until the test closes it
        stop.set()
        await asyncio.gather(*tasks)
    counted = {"submits": submits, "attaches": attaches, "replays": replays}
    print(json.dumps({**counted, "replayed_bytes": replayed_bytes}), flush=True)


if __name__ == "__main__":
    url, key, path, submitters, attachers = sys.argv[1:6]
    replayers = int(sys.argv[6]) if len(sys.argv) > 6 else 0
    asyncio.run(flood(url, key, path, int(submitters), int(attachers), replayers))
