"""The per-worker client pool: reuse after a clean task, close after a failed one."""

from __future__ import annotations

import pytest

from sparklog.spark.client_pool import ClientPool


class Client:
    def __init__(self, config):
        self.config = config
        self.closed = False
        self.resets = 0

    def close(self):
        self.closed = True


def pool(**kwargs):
    return ClientPool(Client, before_reuse=lambda c: setattr(c, "resets", c.resets + 1), **kwargs)


def test_a_finished_lease_hands_the_same_client_to_the_next():
    p = pool()
    with p.lease({"bootstrap.servers": "a:1"}) as first:
        pass
    with p.lease({"bootstrap.servers": "a:1"}) as second:
        assert second is first and not second.closed and second.resets == 1
    with p.lease({"bootstrap.servers": "b:1"}) as other:
        assert other is not first  # another config, another client


def test_a_failed_lease_closes_its_client():
    p = pool()
    with pytest.raises(RuntimeError), p.lease({"x": 1}) as c:
        raise RuntimeError("task failed")
    assert c.closed and p.idle_count() == 0


def test_an_abandoned_generator_closes_its_client():
    p = pool()

    def rows():
        with p.lease({"x": 1}) as c:
            yield c
            yield c

    gen = rows()
    c = next(gen)
    gen.close()  # Spark stopped reading (e.g. a limit)
    assert c.closed and p.idle_count() == 0


def test_idle_clients_are_bounded_and_expire():
    p = pool(idle_max=1, idle_timeout_s=-1.0)  # every idle client is already stale
    with p.lease({"x": 1}) as a, p.lease({"x": 1}) as b:
        assert a is not b
    assert p.idle_count() == 1 and (a.closed or b.closed)
    with p.lease({"x": 1}) as c:  # the idle one is past its timeout: closed, a new one made
        assert c is not a and c is not b
    assert a.closed and b.closed
    p.close_all()
    assert c.closed and p.idle_count() == 0
