"""The HTTP client's slot gate (``tansaku.core.llm.gate``): oldest record first when the slots are full, never
more holders than slots, a slot given back on an exception or a cancellation; and, over a real local server,
a record's next-stage request overtaking newer records' first-stage requests in a streaming build.

Run: pytest tests/test_priority_gate.py
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from tansaku.core.engine import batch_stage
from tansaku.core.llm import ChatRequest, from_spec
from tansaku.core.llm.base import current_priority, in_callers_priority, llm_priority
from tansaku.core.llm.gate import PriorityGate
from tansaku.core.runner import run_pipeline
from tansaku.testing.canned_server import ServerThread


async def _holders_in_order(gate: PriorityGate, priorities: list, order: list, peak: list) -> None:
    async def one(name, priority):
        async with gate.held(priority):
            order.append(name)
            peak[0] = max(peak[0], gate.holders)
            await asyncio.sleep(0.01)

    blockers = [asyncio.create_task(one(f"first{i}", None)) for i in range(gate.slots)]
    await asyncio.sleep(0)  # the blockers hold every slot before the rest arrive
    waiters = [asyncio.create_task(one(name, priority)) for name, priority in priorities]
    await asyncio.gather(*blockers, *waiters)


def test_a_full_gate_admits_by_priority_then_arrival_and_unranked_last():
    gate, order, peak = PriorityGate(2), [], [0]
    arrivals = [("none-a", None), ("c", (0, (5,))), ("a", (0, (1,))), ("b-1", (0, (3,))), ("none-b", None),
                ("b-2", (0, (3,))), ("later-chunk", (1, (0,)))]
    asyncio.run(_holders_in_order(gate, arrivals, order, peak))
    assert order[2:] == ["a", "b-1", "b-2", "c", "later-chunk", "none-a", "none-b"]
    assert peak[0] == 2 and gate.holders == 0 and gate.waiting == 0


def test_without_priorities_the_gate_is_first_come_first_served():
    gate, order, peak = PriorityGate(3), [], [0]
    asyncio.run(_holders_in_order(gate, [(f"r{i}", None) for i in range(10)], order, peak))
    assert order[3:] == [f"r{i}" for i in range(10)] and peak[0] == 3


def test_an_exception_in_the_block_gives_the_slot_back():
    async def scenario():
        gate = PriorityGate(1)
        with pytest.raises(RuntimeError):
            async with gate.held((0, (0,))):
                raise RuntimeError("server went away")
        assert gate.holders == 0
        async with gate.held(None):  # the slot is free again: no wait
            assert gate.holders == 1
        assert gate.holders == 0

    asyncio.run(scenario())


def test_a_cancelled_waiter_leaves_the_queue_and_a_cancelled_holder_frees_its_slot():
    async def scenario():
        gate, admitted = PriorityGate(1), []
        release = asyncio.Event()

        async def hold(name, priority):
            async with gate.held(priority):
                admitted.append(name)
                await release.wait()

        holder = asyncio.create_task(hold("holder", None))
        await asyncio.sleep(0)
        waiter = asyncio.create_task(hold("cancelled", (0, (0,))))
        behind = asyncio.create_task(hold("behind", (0, (9,))))
        await asyncio.sleep(0)
        assert gate.waiting == 2
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert gate.waiting == 1 and gate.holders == 1
        holder.cancel()  # cancelled while holding: its slot goes to the next waiter
        with pytest.raises(asyncio.CancelledError):
            await holder
        await asyncio.sleep(0)
        assert admitted == ["holder", "behind"] and gate.holders == 1 and gate.waiting == 0
        release.set()
        await behind
        assert gate.holders == 0

    asyncio.run(scenario())


def test_a_waiter_cancelled_right_after_it_was_handed_the_slot_gives_it_back():
    async def scenario():
        gate = PriorityGate(1)
        await gate.acquire()
        waiter = asyncio.create_task(gate.acquire((0, (0,))))
        await asyncio.sleep(0)
        gate.release()  # hands the slot to the waiter, counted as held on its behalf
        assert gate.holders == 1
        waiter.cancel()  # before the waiter ran again
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert gate.holders == 0 and gate.waiting == 0

    asyncio.run(scenario())


def test_the_priority_follows_a_records_work_into_a_thread_pool():
    seen = []
    with llm_priority((2, (7,))):
        task = in_callers_priority(lambda: seen.append(current_priority()))
    thread = threading.Thread(target=task)
    thread.start()
    thread.join()
    assert seen == [(2, (7,))] and current_priority() is None


# ---------------------------------------------------------------- streaming over a real local server

class _PoolSize:
    """What the streaming runner reads of a stage's client (``slots``): 8 records at once in each stage,
    so 8 requests wait for the HTTP client's one slot."""

    slots = 8


def _stage(name: str, client):
    def ask(batch: list[dict]) -> list[dict]:
        [answer] = client.chat([ChatRequest(messages=[{"role": "user", "content": f"{name} {batch[0]['i']}"}])])
        assert answer.ok, answer.error
        return [{**batch[0], name: answer.content}]

    return batch_stage(name, ask, 1, client=_PoolSize())


def test_a_records_next_stage_request_overtakes_newer_records_first_stage_requests(tmp_path, monkeypatch):
    monkeypatch.setenv("TANSAKU_STREAMING", "1")
    arrived: list[str] = []

    def respond(request):
        arrived.append(request.messages[-1]["content"])
        return "ok"

    with ServerThread("gate", responder=respond, latency="fixed:0.02") as url:
        client = from_spec(f"http:canned@{url}", cache=False, max_concurrency=1)
        try:
            result = run_pipeline([{"i": i} for i in range(24)], [_stage("first", client),
                                                                  _stage("second", client)],
                                  tmp_path / "out", chunk_size=100)
            rows = list(result.rows())
        finally:
            client.close()
    assert [r["i"] for r in rows] == list(range(24))
    assert len(arrived) == 48
    # First come, first served would put "second 0" behind the 7 first-stage requests already waiting
    # (records 1-7), and so on: each record's second call would wait for ~8 newer first calls.
    for i in range(16):
        assert arrived.index(f"second {i}") < arrived.index(f"first {i + 3}"), arrived
