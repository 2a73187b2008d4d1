"""Seeded fault schedules and their injection.

`make_schedule(seed)` draws a run's faults from its own random stream, so the schedule of a
seed does not change when the cluster's behaviour (and with it the run's random stream) does,
and it prints as plain data in a failure report. Kinds:

- kill: the process dies (its disk survives) and restarts after the duration;
- disk_loss: a kill whose restart comes back with an empty disk (no clean-shutdown marker
  either) under the same broker id; applied only when the controller no longer counts the
  broker in any ISR (losing the disk of the last in-sync copy loses data in Kafka too), else a
  plain restart;
- pause: a GC-like stall; the process resumes with its stale state (the zombie leader);
- isolate / cut_controller / cut_peer: network partitions of a broker from everyone, from the
  controller only (clients still reach it), or from one other broker;
- slow / lossy: every message is delayed more, or dropped with some probability;
- kill_isr: kill every ISR member of a partition at once, restart them one by one (with
  unclean election enabled, a live non-ISR replica may then lead and lose acknowledged data);
- slow_link: one link (broker-broker or broker-controller) gets up to `level` ms more delay;
- strike_on_expand / strike_on_election / strike_on_unfence: armed at their time, they wait
  for the controller to persist the next ISR expansion or leader election of their partition,
  or the next broker unfencing, then kill, pause or isolate the partition's leader `level` ms
  later (FoundationDB's "buggify": faults aimed at the moments where a missing maximal ISR, a
  lagging new-leader HW or a stale proposal would lose data);
- controller_restart: the controller is down, then rebuilds its image from the metadata log;
- controlled_shutdown: the broker asks to shut down (heartbeat want_shut_down), stops when
  the controller agrees, and is relaunched after the duration.
- power_loss: a kill that also loses what the OS had not written back: each log keeps its
  flushed prefix plus a random part of the rest (a torn tail, cut by recovery), and the
  epoch cache and HW checkpoint are trimmed to it, as Kafka's log recovery does. It hits any
  broker, the last ISR member too: the restart has no clean-shutdown marker, so the controller
  takes the broker out of every ISR and ELR and elects an eligible leader replica instead
  (KIP-966). Only when every eligible replica restarted uncleanly as well is the last leader
  elected whatever it lost (Kafka's last resort, which the checks count as unclean when that
  broker ever lost records: `lossy_brokers`);
- clock_jump: the broker's wall clock (ISR lag, follower caught-up times) steps forward or
  back by `level` ms and steps back after the duration; leases run on the controller's
  monotonic clock, as in sparklog's controller.

Preferred-leader rebalancing (auto.leader.rebalance.enable) is on in most schedules, so
leadership also moves away from live leaders, not only on fencing.

At `heal()` every cut, delay and loss ends and every stopped process restarts (disk intact).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .settings import Mutations, SimSettings
from .sim_broker import BrokerNode
from .sim_controller import ControllerNode
from .sim_network import CONTROLLER_ID, Network, Scheduler

_KINDS = (
    ("kill", 3.0),
    ("pause", 3.0),
    ("isolate", 2.0),
    ("cut_controller", 2.0),
    ("cut_peer", 2.0),
    ("disk_loss", 1.5),
    ("slow", 1.0),
    ("lossy", 1.0),
    ("kill_isr", 1.0),
    ("controller_restart", 0.5),
    ("slow_link", 1.5),
    ("strike_on_expand", 2.0),
    ("strike_on_election", 2.0),
    ("strike_on_unfence", 2.0),
    ("controlled_shutdown", 1.0),
    ("power_loss", 2.0),
    ("clock_jump", 1.5),
)
_STRIKE_ACTIONS = ("kill", "pause", "isolate", "cut_controller")
_DURATION_MS = {
    "kill": (300, 6_000),
    "pause": (300, 5_000),
    "isolate": (500, 6_000),
    "cut_controller": (500, 6_000),
    "cut_peer": (500, 6_000),
    "disk_loss": (2_500, 8_000),
    "slow": (1_000, 5_000),
    "lossy": (1_000, 5_000),
    "kill_isr": (500, 5_000),
    "controller_restart": (100, 2_500),
    "slow_link": (1_000, 8_000),
    "strike_on_expand": (500, 5_000),
    "strike_on_election": (500, 5_000),
    "strike_on_unfence": (500, 5_000),
    "controlled_shutdown": (1_000, 6_000),
    "power_loss": (2_500, 8_000),
    "clock_jump": (1_000, 8_000),
}
_CLOCK_JUMPS_MS = (-60_000, -5_000, 5_000, 60_000)


@dataclass(frozen=True, slots=True)
class Fault:
    at_ms: int
    kind: str
    target: int  # broker id; partition index for kill_isr
    duration_ms: int
    peer: int = -1  # cut_peer, slow_link: the other node
    level: float = 0.0  # slow(_link): max delay ms; lossy: loss probability; strike: delay ms
    action: str = ""  # strike_*: what happens to the leader

    def __str__(self) -> str:
        extra = f" peer={self.peer}" if self.peer >= 0 else ""
        extra += f" level={self.level:g}" if self.level else ""
        extra += f" action={self.action}" if self.action else ""
        return f"{self.at_ms:>6} ms {self.kind}({self.target}{extra}) for {self.duration_ms} ms"


@dataclass(frozen=True, slots=True)
class Schedule:
    seed: int
    unclean_leader_election: bool
    auto_leader_rebalance: bool
    faults: tuple[Fault, ...]

    def describe(self) -> str:
        head = (
            f"seed {self.seed}: unclean.leader.election.enable={self.unclean_leader_election}, "
            f"auto.leader.rebalance.enable={self.auto_leader_rebalance}"
        )
        return "\n".join([head, *(f"  {f}" for f in self.faults)])


def make_schedule(seed: int, settings: SimSettings) -> Schedule:
    rng = random.Random(f"sparklog-simulation-schedule-{seed}")
    unclean = rng.random() < 0.25
    rebalance = rng.random() < 0.7
    kinds = [k for k, _ in _KINDS]
    weights = [w for _, w in _KINDS]
    start_ms = settings.warmup_ms
    end_ms = settings.warmup_ms + settings.workload_ms - 2_000
    faults = []
    for _ in range(rng.randint(3, 10)):
        kind = rng.choices(kinds, weights)[0]
        low, high = _DURATION_MS[kind]
        by_partition = kind == "kill_isr" or kind.startswith("strike")
        target = rng.randrange(settings.partitions if by_partition else settings.brokers)
        peer = -1
        if kind in ("cut_peer", "slow_link"):
            others = [b for b in range(settings.brokers) if b != target]
            peer = rng.choice(others + [CONTROLLER_ID] if kind == "slow_link" else others)
        level, action = 0.0, ""
        if kind == "slow":
            level = float(rng.choice((50, 200, 600)))
        elif kind == "lossy":
            level = rng.choice((0.05, 0.2, 0.5))
        elif kind == "slow_link":
            level = float(rng.choice((100, 400, 1_000)))
        elif kind.startswith("strike"):
            level, action = float(rng.randint(0, 300)), rng.choice(_STRIKE_ACTIONS)
        elif kind == "clock_jump":
            level = float(rng.choice(_CLOCK_JUMPS_MS))
        at_ms = rng.randint(start_ms, end_ms)
        duration_ms = rng.randint(low, high)
        faults.append(Fault(at_ms, kind, target, duration_ms, peer, level, action))
    faults.sort(key=lambda f: (f.at_ms, f.kind, f.target))
    return Schedule(seed, unclean, rebalance, tuple(faults))


class FaultInjector:
    """Applies a schedule to the cluster; overlapping faults compose (counted cuts)."""

    def __init__(
        self,
        scheduler: Scheduler,
        network: Network,
        controller: ControllerNode,
        brokers: Sequence[BrokerNode],
        mutations: Mutations | None = None,
    ) -> None:
        self.scheduler = scheduler
        self.mutations = mutations or Mutations()
        self.network = network
        self.controller = controller
        self.brokers = list(brokers)
        self.healed = False
        self._cuts: dict[tuple[int, int], int] = {}
        self._down_until: dict[int, int] = {}
        self._slow = 0
        self._lossy = 0
        self._slow_links: dict[tuple[int, int], int] = {}
        self._armed: list[Fault] = []
        controller.record_listeners.append(self._on_record)
        self.disk_losses = 0
        self.disk_losses_skipped = 0
        self.power_losses = 0
        self.records_lost_to_power_loss = 0
        # power losses of a broker the controller still counts in an ISR or ELR at the restart
        # (before KIP-966 these were skipped: a last ISR member that lost its tail lost data)
        self.power_losses_in_isr = 0
        # brokers whose log ever lost records (power loss, disk loss): the checks treat a
        # last-known-leader election of one as unclean
        self.lossy_brokers: set[int] = set()
        self.clock_jumps = 0
        # broker -> (partition -> records its device kept), decided at the crash
        self._survivors: dict[int, dict[Any, int]] = {}
        self.strikes = 0

    def install(self, schedule: Schedule) -> None:
        for fault in schedule.faults:
            self.scheduler.at(fault.at_ms, self._apply, fault)

    def _apply(self, fault: Fault) -> None:
        if self.healed:
            return
        self.scheduler.note("FAULT %s", fault)
        kind, duration = fault.kind, fault.duration_ms
        if kind in ("kill", "disk_loss"):
            self._kill(fault.target, duration, wipe=kind == "disk_loss")
        elif kind == "power_loss":
            self._power_loss(fault.target, duration)
        elif kind == "clock_jump":
            self._clock_jump(fault.target, int(fault.level), duration)
        elif kind == "pause":
            self.brokers[fault.target].pause(duration)
        elif kind == "isolate":
            others = [b.node_id for b in self.brokers if b.node_id != fault.target]
            self._cut([(fault.target, x) for x in [*others, CONTROLLER_ID]], duration)
        elif kind == "cut_controller":
            self._cut([(fault.target, CONTROLLER_ID)], duration)
        elif kind == "cut_peer":
            self._cut([(fault.target, fault.peer)], duration)
        elif kind == "slow":
            self._slow += 1
            self.network.delay_max_ms = max(self.network.delay_max_ms, int(fault.level))
            self.scheduler.after(duration, self._end_slow)
        elif kind == "lossy":
            self._lossy += 1
            self.network.loss_probability = max(self.network.loss_probability, fault.level)
            self.scheduler.after(duration, self._end_lossy)
        elif kind == "kill_isr":
            self._kill_isr(fault.target, duration)
        elif kind == "controller_restart":
            self.controller.stop()
            self.scheduler.after(duration, self._restart_controller)
        elif kind == "slow_link":
            self._slow_link(fault.target, fault.peer, int(fault.level), duration)
        elif kind.startswith("strike"):
            self._armed.append(fault)
        elif kind == "controlled_shutdown":
            broker = self.brokers[fault.target]
            if broker.up:
                until = self.scheduler.now_ms + duration
                self._down_until[broker.node_id] = max(
                    self._down_until.get(broker.node_id, 0), until
                )
                broker.begin_controlled_shutdown()
                self.scheduler.at(until, self._restart, broker.node_id, False)
        else:
            raise AssertionError(kind)

    def _on_record(self, record: Mapping[str, Any], tp: Any, old: Any) -> None:
        """Fire the first armed strike this metadata record triggers."""
        if not self._armed or self.healed:
            return
        if tp is None:
            kind = "strike_on_unfence" if record["type"] == "UnfenceBroker" else ""
        elif old is None:
            return
        elif int(record["leader"]) >= 0 and int(record["leader"]) != old.leader:
            kind = "strike_on_election"
        elif len(record["isr"]) > len(old.isr):
            kind = "strike_on_expand"
        else:
            return
        for fault in self._armed:
            if fault.kind == kind and (tp is None or fault.target == tp[1]):
                self._armed.remove(fault)
                self.strikes += 1
                self.scheduler.note("STRIKE %s armed by %s", fault, record["type"])
                self.scheduler.after(int(fault.level), self._strike, fault)
                return

    def _strike(self, fault: Fault) -> None:
        """Hit whoever leads the fault's partition now (the controller's view)."""
        if self.healed:
            return
        registrations = sorted(self.controller.image.partitions(), key=lambda p: p.partition)
        leader = registrations[fault.target].leader
        if leader >= 0:
            self._apply(Fault(self.scheduler.now_ms, fault.action, leader, fault.duration_ms))

    # -- processes ----------------------------------------------------------------------------

    def _kill(self, broker_id: int, duration_ms: int, *, wipe: bool = False) -> None:
        self.brokers[broker_id].stop()
        until = self.scheduler.now_ms + duration_ms
        self._down_until[broker_id] = max(self._down_until.get(broker_id, 0), until)
        self.scheduler.at(until, self._restart, broker_id, wipe)

    def _power_loss(self, broker_id: int, duration_ms: int) -> None:
        broker = self.brokers[broker_id]
        if not broker.up:
            return
        rng = self.scheduler.rng
        self._survivors[broker_id] = {
            tp: rng.randint(log.flushed_offset, log.log_end_offset)
            for tp, log in broker.disk.items()
        }
        self._kill(broker_id, duration_ms)

    def _recover_power_loss(self, broker: BrokerNode) -> None:
        survivors = self._survivors.pop(broker.node_id, None)
        if survivors is None:
            return
        self.power_losses += 1
        if self._in_some_isr(broker.node_id, with_elr=True):
            self.power_losses_in_isr += 1
        for tp, end in survivors.items():
            lost = broker.disk[tp].recover_after_power_loss(end)
            self.records_lost_to_power_loss += lost
            if lost:
                self.lossy_brokers.add(broker.node_id)
                self.scheduler.note("b%s lost %s unflushed records of %s", broker.node_id, lost, tp)

    def _clock_jump(self, broker_id: int, jump_ms: int, duration_ms: int) -> None:
        self.clock_jumps += 1
        self.brokers[broker_id].clock_offset_ms += jump_ms
        self.scheduler.after(duration_ms, self._clock_jump_back, broker_id, jump_ms)

    def _clock_jump_back(self, broker_id: int, jump_ms: int) -> None:
        self.brokers[broker_id].clock_offset_ms -= jump_ms

    def _restart(self, broker_id: int, wipe: bool) -> None:
        broker = self.brokers[broker_id]
        if self.healed or broker.up or self.scheduler.now_ms < self._down_until[broker_id]:
            return
        self._recover_power_loss(broker)
        if wipe:
            if self._in_some_isr(broker_id):
                self.disk_losses_skipped += 1
            else:
                self.disk_losses += 1
                broker.disk = {}
                broker.clean_shutdown_epoch = None
                self.lossy_brokers.add(broker_id)
                self.scheduler.note("b%s lost its disk", broker_id)
        broker.start()

    def _in_some_isr(self, broker_id: int, *, with_elr: bool = False) -> bool:
        return any(
            broker_id in p.isr or (with_elr and broker_id in p.elr)
            for p in self.controller.image.partitions()
        )

    def relaunch(self, broker_id: int) -> None:
        """The Spark launcher restarts a broker task that exited (unless a fault holds it)."""
        if self.healed or self.scheduler.now_ms >= self._down_until.get(broker_id, 0):
            broker = self.brokers[broker_id]
            if not broker.up:
                self._recover_power_loss(broker)
                broker.start()

    def _kill_isr(self, partition: int, duration_ms: int) -> None:
        registrations = sorted(self.controller.image.partitions(), key=lambda p: p.partition)
        isr = registrations[partition].isr if partition < len(registrations) else ()
        rng = self.scheduler.rng
        for broker_id in isr:
            self._kill(broker_id, duration_ms + rng.randint(0, 3_000))

    def _restart_controller(self) -> None:
        if not self.controller.up:
            self.controller.start()

    # -- network --------------------------------------------------------------------------------

    def _cut(self, links: list[tuple[int, int]], duration_ms: int) -> None:
        for a, b in links:
            key = (min(a, b), max(a, b))
            self._cuts[key] = self._cuts.get(key, 0) + 1
            self.network.cut(a, b)
        self.scheduler.after(duration_ms, self._uncut, links)

    def _uncut(self, links: list[tuple[int, int]]) -> None:
        if self.healed:
            return
        for a, b in links:
            key = (min(a, b), max(a, b))
            self._cuts[key] -= 1
            if self._cuts[key] == 0:
                self.network.heal(a, b)

    def _slow_link(self, a: int, b: int, delay_ms: int, duration_ms: int) -> None:
        key = (min(a, b), max(a, b))
        self._slow_links[key] = self._slow_links.get(key, 0) + 1
        delays = self.network.link_delay_ms
        delays[(a, b)] = delays[(b, a)] = max(delays.get((a, b), 0), delay_ms)
        self.scheduler.after(duration_ms, self._end_slow_link, a, b)

    def _end_slow_link(self, a: int, b: int) -> None:
        if self.healed:
            return
        key = (min(a, b), max(a, b))
        self._slow_links[key] -= 1
        if self._slow_links[key] == 0:
            self.network.link_delay_ms.pop((a, b), None)
            self.network.link_delay_ms.pop((b, a), None)

    def _end_slow(self) -> None:
        self._slow -= 1
        if self._slow == 0 and not self.healed:
            self.network.delay_max_ms = self.network.base_delay[1]

    def _end_lossy(self) -> None:
        self._lossy -= 1
        if self._lossy == 0 and not self.healed:
            self.network.loss_probability = 0.0

    # -- the end --------------------------------------------------------------------------------

    def heal(self) -> None:
        """End every fault: heal the network, restart what is down (disks intact)."""
        self.healed = True
        self.scheduler.note("HEAL: all faults end")
        self.network.heal_all()
        self._cuts.clear()
        self._slow_links.clear()
        self._armed.clear()
        if not self.controller.up:
            self.controller.start()
        for broker in self.brokers:
            if not broker.up:
                self._recover_power_loss(broker)
                broker.start()
            broker.clock_offset_ms = 0
