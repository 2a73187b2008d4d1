"""One simulated run: a controller, brokers, producers and a consumer, faults from a seed,
checks at every step and at the end. `run_seed(seed)` is the whole public surface.

Phases: start the controller and brokers, wait until every broker is unfenced, create the
topic (RF 3, min.insync.replicas 2, unclean election as the schedule says); produce and
consume while the faults run; heal every fault and stop producing; let the cluster settle;
check the final state (checks.py). The first violated property stops the run and is
reported with the seed, the schedule, the last trace lines and the replay command.
"""

from __future__ import annotations

import hashlib
import itertools
import random
import traceback
from collections import Counter
from dataclasses import dataclass, field

from sparklog.controller.replication_control import NewTopic
from sparklog.metadata.configs import ControllerConfig

from .checks import History, Violation, check_final_state
from .faults import FaultInjector, Schedule, make_schedule
from .messages import TopicPartition
from .settings import Mutations, SimSettings
from .sim_broker import BrokerNode
from .sim_controller import ControllerNode
from .sim_log import SimLog
from .sim_network import CLIENT_BASE_ID, Network, Scheduler
from .workload import ConsumerNode, ProducerNode

TOPIC = "sim"


@dataclass
class Outcome:
    seed: int
    schedule: Schedule
    failure: str | None
    trace: str = ""
    stats: Counter[str] = field(default_factory=Counter)
    sim_ms: int = 0
    fingerprint: str = ""  # digest of the acknowledged records and final logs

    def report(self) -> str:
        """What a failing test prints: the property, the seed, how to replay, what happened."""
        return "\n".join(
            [
                f"simulation seed {self.seed} failed: {self.failure}",
                f"replay: .venv/bin/pytest tests/simulation -p no:cacheprovider "
                f"--sim-seed={self.seed}",
                self.schedule.describe(),
                f"stats: {dict(sorted(self.stats.items()))}",
                "last events:",
                self.trace,
            ]
        )


class SimCluster:
    """Everything one run needs, wired on one scheduler and network."""

    def __init__(
        self,
        seed: int,
        settings: SimSettings,
        mutations: Mutations,
        schedule: Schedule | None = None,
    ) -> None:
        self.settings = settings
        self.schedule = schedule or make_schedule(seed, settings)
        self.scheduler = Scheduler(random.Random(f"sparklog-simulation-run-{seed}"))
        self.network = Network(self.scheduler)
        self.history = History(self.scheduler)
        s = settings
        config = ControllerConfig(
            default_replication_factor=s.replication_factor,
            broker_session_timeout_ms=s.broker_session_timeout_ms,
            broker_heartbeat_interval_ms=s.broker_heartbeat_interval_ms,
            auto_leader_rebalance_enable=self.schedule.auto_leader_rebalance,
            leader_imbalance_check_interval_seconds=s.leader_imbalance_check_interval_seconds,
        )
        self.controller = ControllerNode(
            self.scheduler,
            self.network,
            self.history,
            config,
            tick_interval_ms=s.controller_tick_interval_ms,
            metadata_max_wait_ms=s.metadata_max_wait_ms,
            eligible_leader_replicas=not mutations.no_eligible_leader_replicas,
        )
        self.brokers = [
            BrokerNode(b, self.scheduler, self.network, self.history, s, mutations, self._on_halt)
            for b in range(s.brokers)
        ]
        self.injector = FaultInjector(
            self.scheduler, self.network, self.controller, self.brokers, mutations
        )
        self.tps: list[TopicPartition] = [(TOPIC, i) for i in range(s.partitions)]
        self.history.isr_of = self._isr_of
        self.history.lossy_brokers = self.injector.lossy_brokers
        self.history.log_of = lambda broker, tp: self.brokers[broker].disk.get(tp)
        producer_ids = itertools.count(1000)
        broker_ids = [b.node_id for b in self.brokers]
        self.producers = [
            ProducerNode(
                CLIENT_BASE_ID + i,
                self.scheduler,
                self.network,
                self.history,
                s,
                broker_ids,
                self.tps[i % len(self.tps)],
                lambda: next(producer_ids),
            )
            for i in range(s.producers)
        ]
        self.consumer = ConsumerNode(
            CLIENT_BASE_ID + 99, self.scheduler, self.network, self.history, s, broker_ids, self.tps
        )

    def _isr_of(self, tp: TopicPartition) -> tuple[int, ...]:
        topic = self.controller.image.topic(tp[0])
        partition = None if topic is None else topic.partitions.get(tp[1])
        # KIP-966: eligible leader replicas hold every committed record as ISR members do
        return () if partition is None else (*partition.isr, *partition.elr)

    def _on_halt(self, broker_id: int) -> None:
        self.history.stats["halts"] += 1
        self.scheduler.after(self.settings.relaunch_delay_ms, self.injector.relaunch, broker_id)

    def run(self) -> None:
        s = self.settings
        self.controller.start()
        for broker in self.brokers:
            broker.start()
        self._run_until(lambda: len(self.controller.image.unfenced_brokers()) == s.brokers)
        self._create_topic()
        for client in [*self.producers, self.consumer]:
            client.start()
        self.injector.install(self.schedule)
        heal_ms = s.warmup_ms + s.workload_ms
        self.scheduler.run_until(heal_ms)
        self.injector.heal()
        for producer in self.producers:
            producer.stop_producing()
        self.scheduler.run_until(heal_ms + s.settle_ms)
        self.check_final_state()

    def _run_until(self, condition, limit_ms: int = 10_000) -> None:
        deadline = self.scheduler.now_ms + limit_ms
        while not condition():
            assert self.scheduler.now_ms < deadline, "cluster did not start"
            self.scheduler.run_until(self.scheduler.now_ms + 50)

    def _create_topic(self) -> None:
        s = self.settings
        configs = {
            "min.insync.replicas": str(s.min_insync_replicas),
            "unclean.leader.election.enable": str(self.schedule.unclean_leader_election).lower(),
        }
        topic = NewTopic(TOPIC, s.partitions, s.replication_factor, configs=configs)
        (result,) = self.controller.commit(self.controller.controller.create_topics([topic]))
        assert result.error.is_success, result.error

    def check_final_state(self) -> None:
        image = self.controller.image
        topic = image.topic(TOPIC)
        assert topic is not None
        registrations = {(TOPIC, i): p for i, p in topic.partitions.items()}
        logs: dict[TopicPartition, dict[int, SimLog]] = {}
        leader_hws: dict[TopicPartition, int] = {}
        for tp, registration in registrations.items():
            logs[tp] = {b.node_id: b.disk.get(tp, SimLog()) for b in self.brokers}
            leader_hws[tp] = self._leader_high_watermark(tp, registration.leader)
        live = [b.node_id for b in self.brokers if b.up]
        check_final_state(self.history, registrations, logs, leader_hws, live)
        for producer in self.producers:
            if producer.in_flight is not None:
                self.history.fail(
                    f"liveness: producer {producer.node_id} still waits for "
                    f"{producer.in_flight} after settling"
                )

    def fingerprint(self) -> str:
        digest = hashlib.sha256()
        for tp in self.tps:
            digest.update(repr(self.history.acked.get(tp, [])).encode())
            for broker in self.brokers:
                digest.update(repr(broker.disk.get(tp, SimLog()).records).encode())
        return digest.hexdigest()

    def _leader_high_watermark(self, tp: TopicPartition, leader: int) -> int:
        if not 0 <= leader < len(self.brokers) or not self.brokers[leader].up:
            return -1
        partition = self.brokers[leader].partitions.get(tp)
        if partition is None or not partition.is_leader:
            self.history.fail(f"liveness: broker {leader} does not act as leader of {tp}")
        return partition.high_watermark


def run_seed(
    seed: int,
    settings: SimSettings | None = None,
    mutations: Mutations | None = None,
    schedule: Schedule | None = None,
) -> Outcome:
    """Run one seed to the end or to its first violation (`schedule`: a fixed one instead of
    the seed's; the seed still drives every other random choice)."""
    cluster = SimCluster(seed, settings or SimSettings(), mutations or Mutations(), schedule)
    failure = None
    try:
        cluster.run()
    except Violation as e:
        failure = str(e)
    except Exception as e:  # noqa: BLE001 - a crash of the real code under test is a finding
        frames = traceback.format_exception(e, limit=-6)
        failure = f"{type(e).__name__}: {e}\n" + "".join(frames)
    stats = cluster.history.stats
    stats["events"] = cluster.scheduler.events_run
    stats["messages"] = cluster.network.sent
    stats["disk_losses"] = cluster.injector.disk_losses
    stats["power_losses"] = cluster.injector.power_losses
    stats["power_losses_in_isr"] = cluster.injector.power_losses_in_isr
    stats["records_lost_to_power_loss"] = cluster.injector.records_lost_to_power_loss
    stats["clock_jumps"] = cluster.injector.clock_jumps
    stats["strikes"] = cluster.injector.strikes
    return Outcome(
        seed,
        cluster.schedule,
        failure,
        cluster.scheduler.format_trace() if failure else "",
        stats,
        cluster.scheduler.now_ms,
        cluster.fingerprint(),
    )
