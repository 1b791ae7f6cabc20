"""Where a LangGraph client that rejoins a run's stream resumes, and what its viewer must know.

A LangGraph `Last-Event-ID` is a stored event's id or a frame id (`<event id>.<n>`,
`stream.split_frame_id`); the viewer that serves the rejoined client first takes in the events
the client already has, so it holds what the viewer that sent them held.
"""

from __future__ import annotations

from server import inputs
from server.resources import Resources
from server.streaming.attach import REPLAY_PAGE
from wire.events import parse_event_id

from .stream import LangGraphStream, split_frame_id

__all__ = ["catch_up", "opens", "resume_point"]

_U64 = 2**64 - 1
_FROM_THE_START = ("", "-1", "-", "0")  # the `Last-Event-ID`s that hold no id
RECENT_EVENTS = 64  # how far back a resumed viewer looks first (`take_recent`)


def _id_before(event_id: str) -> str:
    """The stream position just before `event_id`: reading after it starts at `event_id`."""
    ms, seq = parse_event_id(event_id)
    return f"{ms}-{seq - 1}" if seq else f"{ms - 1}-{_U64}"


def opens(last_event_id: str | None) -> bool:
    """True when a join with this `Last-Event-ID` starts with the opening `metadata`: the
    client holds no id (absent, `-1`, `-`, empty or `0`). One that holds an id, the opening's
    `0-0` among them, has had it; LangGraph's resumed join sends none either."""
    return last_event_id is None or last_event_id.strip() in _FROM_THE_START


def resume_point(last_event_id: str | None) -> tuple[str, tuple[str, int] | None]:
    """Where to resume for LangGraph's `Last-Event-ID` (absent, `-1`, `-` or `0`: from the
    start), and for a frame id the event the client has part of, with how many of its
    frames."""
    if last_event_id is None or opens(last_event_id):
        return "0-0", None
    try:
        event_id, frames_sent = split_frame_id(last_event_id.strip())
    except ValueError:
        event_id, frames_sent = last_event_id, None  # refused by `inputs.event_id`, naming it
    event_id = inputs.event_id(event_id)
    if frames_sent is None or event_id == "0-0":
        return event_id, None
    return _id_before(event_id), (event_id, frames_sent)


async def catch_up(
    resources: Resources, run_id: str, translator: LangGraphStream, after: str
) -> None:
    """Bring `translator` to the state of the viewer that sent the client the events up to
    `after`: from the few events before it when they tell (one read), else from all of them
    (a read of the stream from its start, writing nothing)."""
    if after == "0-0":
        return
    if translator.resumes_from_recent:
        recent = await resources.events.read_back(run_id, after, RECENT_EVENTS)
        if translator.take_recent(recent, whole_stream=len(recent) < RECENT_EVENTS):
            return
    async for event in resources.events.read_from_start(run_id, through=after, page=REPLAY_PAGE):
        translator.skip(event)
