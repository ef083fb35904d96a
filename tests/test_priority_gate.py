"""The HTTP client's slot gate (``tansaku.core.llm.gate``): the smallest priority first when the slots are full,
never more holders than slots, a slot given back on an exception or a cancellation; the rank of a record's
request (earlier stage, then earlier agent turn, then input order); and, over a real local server, every
first-stage request of a streaming build going before any second-stage one.

Run: pytest tests/test_priority_gate.py
"""

from __future__ import annotations

import asyncio
import threading

import pytest
from fixtures.envs.helpers import task_rows, tool_results

from tansaku.core.engine import batch_stage
from tansaku.core.llm import ChatRequest, ScriptedLLM, from_spec
from tansaku.core.llm.base import current_priority, in_callers_priority, llm_priority, llm_turn, record_rank
from tansaku.core.llm.gate import PriorityGate
from tansaku.core.runner import run_pipeline
from tansaku.envs.environments import make_environment_factory
from tansaku.envs.rollout import run_rollouts
from tansaku.envs.tasks import TASKS
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


def test_earlier_stages_requests_go_first_when_the_slots_are_full(tmp_path, monkeypatch):
    monkeypatch.setenv("TANSAKU_STREAMING", "1")
    arrived: list[str] = []

    def respond(request):
        arrived.append(request.messages[-1]["content"])
        return "ok"

    with ServerThread("gate", responder=respond, latency="fixed:0.05") as url:
        client = from_spec(f"http:canned@{url}", cache=False, max_concurrency=1)
        try:
            result = run_pipeline([{"i": i} for i in range(24)], [_stage("first", client),
                                                                  _stage("second", client)],
                                  tmp_path / "out", chunk_size=100)
            rows = list(result.rows())
        finally:
            client.close()
    assert [r["i"] for r in rows] == list(range(24))
    # Oldest record first sent "second 0" as soon as record 0's first answer was back, ahead of records 9-23's
    # first requests. A first-stage request has more calls to come after it, so every one goes first; then
    # the second stage's, in input order.
    assert sorted(arrived[:24]) == sorted(f"first {i}" for i in range(24)), arrived
    assert arrived[24:] == [f"second {i}" for i in range(24)], arrived


def test_a_records_rank_orders_stage_then_turn_then_input_order():
    seen = []
    with llm_priority(record_rank(1, 0, (5,))):
        seen.append(current_priority())
        with llm_turn(2):
            seen.append(current_priority())
        seen.append(current_priority())
    with llm_turn(3):  # no rank set (a caller outside a streaming stage): it stays unranked
        seen.append(current_priority())
    assert seen == [(1, 0, 0, (5,)), (1, 2, 0, (5,)), (1, 0, 0, (5,)), None]
    old_record_late_turn = (0, 4, 0, (0,))
    assert old_record_late_turn < (0, 5, 0, (0,)) < record_rank(1, 2, (9,))  # an earlier stage first
    assert (0, 1, 3, (9,)) < old_record_late_turn  # an earlier turn of a newer record first


class _RankSeen(ScriptedLLM):
    """A scripted model with 'server slots' (as an HTTP client has) that notes the rank of every request."""

    slots = 4

    def __init__(self, respond):
        super().__init__(respond)
        self.ranks: list[tuple] = []
        self.lock = threading.Lock()

    def chat(self, requests):
        with self.lock:
            self.ranks += [(len(tool_results(r)), current_priority()) for r in requests]
        return super().chat(requests)


def _search_then_answer(request):
    if len(tool_results(request)) < 2:
        return '<tool_call>\n{"name": "search", "arguments": {"query": "月見坂"}}\n</tool_call>'
    return "{{白砂市}}"


@pytest.mark.parametrize("episodes", [1, 3])  # one episode takes the batched loop, several their own threads
def test_each_agent_turn_ranks_as_its_turn_of_the_records_stage(envs_index, episodes):
    task, client = TASKS["multihop_qa"], _RankSeen(_search_then_answer)
    with llm_priority(record_rank(2, 1, (7,))):
        trajectories = run_rollouts(client, task, task_rows("multihop")[:1],
                                    make_environment_factory(task, envs_index), k=episodes, score=False)
    assert [t.turns for t in trajectories] == [3] * episodes
    # a request after t tool results is turn t
    assert sorted(client.ranks) == sorted((t, (2, t, 1, (7,))) for t in range(3) for _ in range(episodes))
