"""The deterministic replication simulation: hundreds of seeded fault schedules against the
real controller and partition cores, plus the self-tests that show the checks can fail.

Run: `.venv/bin/pytest tests/simulation -q -p no:cacheprovider` (seeds 0..499);
more: `--sim-seeds=5000`; reproduce one: `--sim-seed=K` (its failure report prints K, the
schedule and the last events).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sparklog.broker.truncation import truncation_for
from sparklog.records import SimpleRecord, build_batch
from sparklog.storage.log import Log

from .faults import Fault, Schedule
from .settings import Mutations
from .sim_cluster import Outcome, run_seed
from .sim_log import MemoryEpochCache, real_log_truncation_clears_epoch_at_end


def test_seed(sim_seed: int) -> None:
    outcome = run_seed(sim_seed)
    if outcome.failure is not None:
        pytest.fail(outcome.report(), pytrace=False)


def test_follower_truncation_finishes_on_the_real_log(tmp_path: Path) -> None:
    """A livelock the simulation found (seeds 1727 with clean elections, 205, 316 unclean, at
    the time), replayed on the real `Log` and `truncation_for`: `Log.truncate_to(log end)` must
    drop an epoch entry that starts at the log end, as Kafka's `UnifiedLog.truncateTo` does.

    A clean history leading there (RF 3, replicas [1, 2, 0]): leader 1 (epoch 1) appends
    offset 85, only broker 0 copies it; 1 is fenced, 2 (log end 85, still in the ISR) is
    elected in epoch 2 and stamps 2@85, then is fenced before appending; 0 is elected in
    epoch 3 (its cache 0@0, 1@85, 3@86). Broker 2 comes back as a follower and asks for its
    latest epoch, 2.
    """
    leader = MemoryEpochCache()
    for epoch, start in ((0, 0), (1, 85), (3, 86)):
        leader.assign(epoch, start)
    follower = Log.open(tmp_path / "sim-0", now_ms=0)
    follower.append_as_leader(build_batch([SimpleRecord(b"v", None, 0)] * 85), 0, 0)
    follower.epoch_cache.assign(2, follower.log_end_offset)  # BecameLeader, nothing appended
    try:
        for _ in range(8):
            epoch, end_offset = leader.end_offset_for(follower.latest_epoch, 90)
            cut = truncation_for(
                epoch,
                end_offset,
                local_end_offset_for=lambda e: follower.epoch_cache.end_offset_for(
                    e, follower.log_end_offset
                ),
                log_end_offset=follower.log_end_offset,
                high_watermark=follower.high_watermark,
            )
            follower.truncate_to(cut.offset, 0)
            if cut.done:
                break
        assert cut.done, f"still truncating, asking for epoch {follower.latest_epoch} again"
        assert (follower.log_end_offset, follower.latest_epoch) == (85, 0)
        assert real_log_truncation_clears_epoch_at_end()  # the simulated log behaves the same
    finally:
        follower.close()


def test_a_seed_replays_identically() -> None:
    first, second = run_seed(7), run_seed(7)
    assert first.failure is None, first.report()
    assert first.fingerprint == second.fingerprint
    assert first.stats == second.stats
    assert run_seed(8).fingerprint != first.fingerprint


def test_a_run_exercises_the_faults_it_is_meant_to() -> None:
    """Across a few seeds the runs elect, truncate, dedupe retries and acknowledge."""
    totals: dict[str, int] = {}
    for seed in range(20):
        outcome = run_seed(seed)
        assert outcome.failure is None, outcome.report()
        for key, value in outcome.stats.items():
            totals[key] = totals.get(key, 0) + value
    for key in (
        "acked",
        "consumed",
        "elections",
        "truncations",
        "duplicates_deduped",
        "power_losses",
        "records_lost_to_power_loss",
        "clock_jumps",
    ):
        assert totals.get(key, 0) > 0, (key, totals)
    assert totals["acked"] > 20 * 100


def first_failing_seed(mutations: Mutations, seeds: range) -> Outcome | None:
    for seed in seeds:
        outcome = run_seed(seed, mutations=mutations)
        if outcome.failure is not None:
            return outcome
    return None


@pytest.mark.parametrize(
    ("mutation", "checks"),
    [
        ("follower_skips_truncation", ("committed record changed", "ISR contract", "truncated")),
        ("high_watermark_is_max", ("committed record changed", "ISR contract", "truncated")),
    ],
)
def test_the_checks_catch_a_broken_replication(mutation: str, checks: tuple[str, ...]) -> None:
    outcome = first_failing_seed(Mutations(**{mutation: True}), range(60))
    assert outcome is not None, f"no seed of 60 notices {mutation}"
    assert outcome.failure is not None
    assert any(check in outcome.failure for check in checks), outcome.report()
    assert f"--sim-seed={outcome.seed}" in outcome.report()


@pytest.mark.slow
def test_the_isr_contract_catches_a_missing_maximal_isr() -> None:
    outcome = first_failing_seed(Mutations(no_maximal_isr=True), range(300))
    assert outcome is not None and outcome.failure is not None
    assert "ISR contract broken" in outcome.failure, outcome.report()


def kip_966_schedule(seed: int) -> Schedule:
    """KIP-966's case as a fixed schedule: broker 2 stops cleanly (the ISR stays at
    min.insync.replicas=2), broker 1 is cut off (it leaves the ISR below min ISR: an eligible
    leader replica), then the leader, broker 0, loses power as the last ISR member and comes
    back first, without the tail its OS had not written back."""
    faults = (
        Fault(4_000, "controlled_shutdown", 2, 16_000),
        Fault(8_000, "isolate", 1, 6_000),
        Fault(8_200, "power_loss", 0, 2_500),
    )
    return Schedule(seed, unclean_leader_election=False, auto_leader_rebalance=False, faults=faults)


@pytest.mark.parametrize("seed", [0, 3])
def test_a_power_lost_last_isr_member_loses_no_acknowledged_record(seed: int) -> None:
    """With Eligible Leader Replicas (KIP-966) the power-lost last ISR member registers without
    a clean-shutdown epoch, leaves the ELR and waits; broker 1, which left the ISR holding every
    committed record, leads when it is back. Before, the power loss of a broker still in an ISR
    was not even applied (the simulation's gate), because it lost acknowledged records."""
    outcome = run_seed(seed, schedule=kip_966_schedule(seed))
    assert outcome.failure is None, outcome.report()
    assert outcome.stats["records_lost_to_power_loss"] > 0
    assert outcome.stats["power_losses_in_isr"] == 1
    assert outcome.stats["unclean_elections"] == 0


def test_without_eligible_leader_replicas_the_power_lost_last_isr_member_loses_records() -> None:
    """The same schedule on a cluster from before KIP-966 (the feature at level 0): broker 0
    returns, is elected from the ISR it never left, and the committed records it lost are gone
    (broker 1 must cut them when it follows)."""
    outcome = run_seed(
        0, mutations=Mutations(no_eligible_leader_replicas=True), schedule=kip_966_schedule(0)
    )
    assert outcome.failure is not None
    assert any(
        check in outcome.failure
        for check in ("below its HW", "ISR contract broken", "acknowledged record lost")
    ), outcome.report()


@pytest.mark.slow
def test_the_checks_catch_a_power_loss_of_the_last_isr_member_without_elr() -> None:
    """Across random schedules too: without Eligible Leader Replicas some seed's power loss of
    an ISR member loses committed records, and the checks see it."""
    outcome = first_failing_seed(Mutations(no_eligible_leader_replicas=True), range(300))
    assert outcome is not None and outcome.failure is not None
    assert any(
        check in outcome.failure
        for check in ("ISR contract broken", "acknowledged record lost", "committed record")
    ), outcome.report()
