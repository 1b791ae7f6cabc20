"""What agent-chat-ui reads when its page is reloaded while an answer streams, and when it is
reloaded again after the run ended: the same requests the page makes, answered as
`langgraph dev` answers them (observed side by side in Chromium by `bench.langgraph_ui_reload`;
docs/langgraph.md, "A thread while a run goes on").

The page does not rejoin the run: it reads `POST /threads/search` and `POST
/threads/{id}/history {"limit": 10}` once. Mid-answer, the history's newest state is the
running run's checkpoint (a `next`, no interrupt), which the UI's `useStream` shows as a
"Human Interrupt / when: breakpoint" card on both servers; once the run ended, the newest
state holds the answer and names no next node, so the next reload shows the answer.
"""

from __future__ import annotations

import uuid
from typing import Any

import httpx

from tests.conftest import ServerHandle
from tests.test_langgraph_api import eventually, slow, words

ANSWER_WORDS = 150  # the fake model echoes them a token every 20 ms: seconds of answer
# what the page sends and reads (agent-chat-ui's Stream provider and thread view)
SEARCH = {"metadata": {"graph_id": "chat"}, "limit": 100, "offset": 0}
HISTORY = {"limit": 10}
STREAM_MODES = ["values", "messages-tuple", "custom"]


def ui_message(text: str) -> dict[str, Any]:
    """A human message as agent-chat-ui sends it: an id and text blocks."""
    return {"id": str(uuid.uuid4()), "type": "human", "content": [{"type": "text", "text": text}]}


async def start_streaming_and_leave(http: httpx.AsyncClient, tid: str, text: str) -> str:
    """The page's `runs/stream` request, cut once the answer's first token came (the reload);
    returns the run id."""
    body = {
        "input": {"messages": [ui_message(text)]},
        "config": slow(),
        "stream_mode": STREAM_MODES,
        "stream_subgraphs": True,
        "stream_resumable": True,
        "assistant_id": "chat",
        "on_disconnect": "continue",
    }
    async with http.stream("POST", f"/threads/{tid}/runs/stream", json=body) as answer:
        assert answer.status_code == 200, await answer.aread()
        run_id = answer.headers["content-location"].rsplit("/", 1)[-1]
        async for line in answer.aiter_lines():
            if line.startswith("event: messages"):
                return run_id
    raise AssertionError("the stream ended before the answer's first token")


def newest(history: list[dict[str, Any]]) -> dict[str, Any]:
    assert history, "no state in the history"
    return history[0]


async def test_a_reload_mid_answer_reads_a_breakpoint_like_head_and_one_after_the_run_the_answer(
    server: ServerHandle, worker: Any
) -> None:
    text = words(ANSWER_WORDS)
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
        tid = (await http.post("/threads", json={"metadata": {}})).json()["thread_id"]
        run_id = await start_streaming_and_leave(http, tid, text)

        # the reload, mid-answer: the run goes on without the page
        [found] = (await http.post("/threads/search", json=SEARCH)).json()
        assert found["thread_id"] == tid and found["status"] == "busy", found
        answer = await http.post(f"/threads/{tid}/history", json=HISTORY)
        assert answer.status_code == 200, answer.text
        head = newest(answer.json())
        # the running run's checkpoint, as LangGraph's server shows it: a next node, no
        # interrupt anywhere, no answer yet (useStream reads this as `{"when": "breakpoint"}`)
        assert head["next"], head
        assert head["interrupts"] == [], head
        assert all(task["interrupts"] == [] for task in head["tasks"]), head["tasks"]
        assert [m["type"] for m in head["values"]["messages"]] == ["human"], head["values"]
        assert (await http.get(f"/threads/{tid}/runs/{run_id}")).json()["status"] == "running"

        # the run ends with nobody watching; the page's next reload reads the answer
        joined = await http.get(f"/threads/{tid}/runs/{run_id}/join")
        assert joined.status_code == 200, joined.text

        async def idle() -> bool:
            [found] = (await http.post("/threads/search", json=SEARCH)).json()
            return bool(found["status"] == "idle")

        await eventually(idle, "the thread to be idle once its run ended")
        head = newest((await http.post(f"/threads/{tid}/history", json=HISTORY)).json())
        assert head["next"] == [] and head["interrupts"] == [] and head["tasks"] == [], head
        messages = head["values"]["messages"]
        assert [m["type"] for m in messages] == ["human", "ai"], messages
        assert messages[1]["content"] == text
