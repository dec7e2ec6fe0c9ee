"""The daemon tests' thread: its `thread/start` and `turn/start` params, and whether a client saw its turns complete."""

from __future__ import annotations

from typing import Any

THREAD = "thr_test"


START = {"providerId": "fake", "threadId": THREAD, "cwd": "/tmp", "options": {}}


def turn(n: int = 1, thread: str = THREAD) -> dict[str, Any]:
    return {
        "providerId": "fake",
        "threadId": thread,
        "input": [],
        "clientRequestId": f"creq_{'abcdefghjk'[:9]}{'mnpqrstuvw'[n % 10]}",
    }


def completed(client: Any, thread: str = THREAD, count: int = 1) -> bool:
    return client.types(thread).count("turn/completed") >= count
