"""queued.max.requests and queued.max.request.bytes as admission bounds: a full queue or an
exhausted pool makes the next request wait, a parked request frees its slot, and the pool is
non-strict like Kafka's (one large request passes while anything is left)."""

from __future__ import annotations

import asyncio

import pytest

from sparklog.protocol.request_queue import MemoryPool, RequestSlots, release_request_slot


def test_a_full_queue_makes_the_next_request_wait_until_one_is_answered():
    async def scenario():
        slots = RequestSlots(2)
        order = []
        gate = asyncio.Event()

        async def request(name, wait):
            async with slots.slot():
                order.append(f"start {name}")
                if wait:
                    await gate.wait()
                order.append(f"end {name}")

        first = [asyncio.create_task(request(n, True)) for n in ("a", "b")]
        await asyncio.sleep(0.01)
        third = asyncio.create_task(request("c", False))
        await asyncio.sleep(0.01)
        assert slots.in_use == 2 and "start c" not in order
        gate.set()
        await asyncio.gather(*first, third)
        assert order.index("start c") > order.index("end a")
        assert slots.in_use == 0

    asyncio.run(scenario())


def test_a_parked_request_gives_its_slot_back_once():
    async def scenario():
        slots = RequestSlots(1)
        parked = asyncio.Event()
        done = asyncio.Event()

        async def long_poll():
            async with slots.slot():
                release_request_slot()  # what DelayedOperations.register does
                release_request_slot()  # twice is harmless
                parked.set()
                await done.wait()

        task = asyncio.create_task(long_poll())
        await parked.wait()
        async with slots.slot():  # admitted while the long poll waits
            assert slots.in_use == 1
        done.set()
        await task
        assert slots.in_use == 0

    asyncio.run(scenario())


def test_queued_max_requests_must_be_positive():
    with pytest.raises(ValueError, match="queued.max.requests"):
        RequestSlots(0)


def test_an_exhausted_pool_waits_and_is_non_strict():
    async def scenario():
        pool = MemoryPool(1000)
        big = await pool.reserve(5000)  # more than the pool: allowed while anything is left
        assert pool.reserved == 5000
        waiter = asyncio.create_task(pool.reserve(10))
        await asyncio.sleep(0.01)
        assert not waiter.done(), "nothing left: the next reservation waits"
        pool.release(big)
        assert await asyncio.wait_for(waiter, 1) == 10
        assert pool.reserved == 10

    asyncio.run(scenario())


def test_an_unbounded_pool_never_waits():
    async def scenario():
        pool = MemoryPool(-1)
        assert not pool.bounded
        assert await pool.reserve(10**9) == 0

    asyncio.run(scenario())
