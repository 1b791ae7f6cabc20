"""One caller flooding routes of the LangGraph API, as a process of its own.

`python -m tests.flood_routes URL API_KEY SPEC` sends, until its standard input closes, each
request of SPEC (JSON: `[{"method", "path", "json", "concurrency"}, ...]`) in `concurrency`
loops at once, then prints `{path: {status: count}}` as one line of JSON. A separate process,
so that the flood's own client work does not slow the measurements of the test that starts it
(`tests/test_write_budgets.py`, `TestFloods`).
"""

from __future__ import annotations

import asyncio
import collections
import json
import sys
from typing import Any

import httpx


async def flood(url: str, key: str, spec: list[dict[str, Any]]) -> None:
    answers: dict[str, collections.Counter[int]] = collections.defaultdict(collections.Counter)
    stop = asyncio.Event()
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=100)
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(
        base_url=url, timeout=120, limits=limits, headers=headers
    ) as client:

        async def send_forever(request: dict[str, Any]) -> None:
            while not stop.is_set():
                try:
                    answer = await client.request(
                        request["method"], request["path"], json=request.get("json")
                    )
                    answers[request["path"]][answer.status_code] += 1
                except httpx.HTTPError:
                    answers[request["path"]][0] += 1

        tasks = [
            asyncio.create_task(send_forever(request))
            for request in spec
            for _ in range(request["concurrency"])
        ]
        stdin = asyncio.StreamReader()
        loop = asyncio.get_running_loop()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
        await stdin.read()  # until the test closes it
        stop.set()
        await asyncio.gather(*tasks)
    print(json.dumps(answers), flush=True)


if __name__ == "__main__":
    asyncio.run(flood(sys.argv[1], sys.argv[2], json.loads(sys.argv[3])))
