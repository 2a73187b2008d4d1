"""The coordinators' clock (issue 27, item 3): wall-clock across processes, never jumping inside
one, never behind the table; and tables written by coordinators that persisted machine uptime
load without expiring offsets or holding transactions open."""

from __future__ import annotations

from sparklog.coordinator.clock import WALL_CLOCK_FLOOR_MS, CoordinatorClock, loaded_ms
from sparklog.coordinator.server import newest_time_ms
from sparklog.coordinator.transaction.metadata import TxnState

from .harness import Harness
from .test_classic_groups import stable_group
from .test_transactions import TIMEOUT_MS
from .test_transactions import Harness as TxnHarness

DAY_MS = 86_400_000
WALL_MS = 1_750_000_000_000


class Dial:
    def __init__(self, ms: int) -> None:
        self.ms = ms

    def __call__(self) -> int:
        return self.ms


def test_the_clock_is_the_wall_clock_at_start_and_moves_monotonically():
    wall, mono = Dial(WALL_MS), Dial(3 * DAY_MS)  # a host up for three days
    clock = CoordinatorClock(wall_ms=wall, mono_ms=mono)
    assert clock() == WALL_MS
    mono.ms += 1_500
    assert clock() == WALL_MS + 1_500
    wall.ms -= 2 * DAY_MS  # an NTP step back: sessions and timeouts do not notice
    mono.ms += 500
    assert clock() == WALL_MS + 2_000
    wall.ms += 9 * DAY_MS  # nor a step forward
    assert clock() == WALL_MS + 2_000


def test_the_clock_never_runs_behind_the_newest_time_in_the_table():
    clock = CoordinatorClock(wall_ms=Dial(WALL_MS - 3 * DAY_MS), mono_ms=Dial(0))
    clock.not_before(WALL_MS)
    assert clock() == WALL_MS
    clock.not_before(WALL_MS - DAY_MS)  # never back
    clock.not_before(None)
    assert clock() == WALL_MS
    rows = [
        {"commit_timestamp_ms": 5_000},  # uptime, from an old coordinator: ignored
        {"commit_timestamp_ms": WALL_MS},
        {"commit_timestamp_ms": None},
        {"commit_timestamp_ms": WALL_MS - 10},
    ]
    assert newest_time_ms(rows) == WALL_MS
    assert newest_time_ms([{"commit_timestamp_ms": 5_000}]) is None


def test_uptime_times_count_from_the_load():
    assert loaded_ms(5_000, WALL_MS) == WALL_MS
    assert loaded_ms(-1, WALL_MS) == -1  # a sentinel (no transaction open) stays
    assert loaded_ms(WALL_CLOCK_FLOOR_MS, WALL_MS) == WALL_CLOCK_FLOOR_MS


def test_offsets_an_uptime_clock_wrote_are_kept_a_whole_retention_after_the_upgrade():
    retention_ms = 60_000
    h = Harness(offsets_retention_minutes=1, offsets_retention_check_interval_ms=1_000)
    h.now_ms = 8 * DAY_MS  # the old coordinator: a host up for 8 days
    (a,) = stable_group(h, 1, group="left")
    h.commit({("t", 0): 5}, group="left", member_id=a, generation=1)
    h.leave((a, None), group="left")
    h.commit({("t", 1): 9}, group="standalone")
    h.now_ms = WALL_MS  # the new coordinator reads the wall clock
    h.restart()
    h.advance(retention_ms - 1_000)  # the first expiry checks
    assert h.committed("left") == {("t", 0): 5}
    assert h.committed("standalone") == {("t", 1): 9}
    h.advance(2_000)
    assert h.committed("left") == {} and h.committed("standalone") == {}


def test_a_transaction_an_uptime_clock_started_times_out_one_timeout_after_the_upgrade():
    h = TxnHarness()
    h.now_ms = 8 * DAY_MS
    pid, epoch = h.init("tx")[1:3]
    assert h.add("tx", pid, epoch) == 0
    h.now_ms = WALL_MS
    h.restart()
    h.advance(TIMEOUT_MS // 2)
    assert h.state("tx") is TxnState.ONGOING
    h.advance(TIMEOUT_MS // 2)
    assert h.state("tx") is not TxnState.ONGOING  # fenced and aborting
