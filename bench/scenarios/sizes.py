"""Sizes shared by a scenario and the baseline it is compared with."""

from __future__ import annotations

THROUGHPUT_WORDS = 20_000  # one_run_throughput's message; the body stays under 1 MiB
TTFT_TEXT = "hello world"  # first_token's short message
ATTACH_EVENTS = 10_000  # attach_finished's stream length; redis reads back as many entries
