"""The broker's side of its lease with the controller (Kafka's `BrokerLifecycleManager`):
registration, heartbeats, fencing and the controlled-shutdown handshake.

Registration (BrokerRegistration) retries while an older incarnation's lease still holds the id,
and gives up after three session timeouts (a live process holds it). Heartbeats run every
broker.heartbeat.interval.ms, fast while fenced; an answer that the registration was lost
registers again; `should_shut_down` starts the broker's shutdown. A log dir that went offline
makes the next heartbeat ask to be fenced at once (`want_fence`), so leaderships move to replicas
on healthy disks. The controlled shutdown heartbeats `want_shut_down` until the controller, having
moved our leaderships, answers `should_shut_down`, for at most one session timeout.

A mixin of `server.BrokerServer`, whose collaborators it uses (the attributes declared below);
the state it owns (`broker_epoch`, the events) is set up by the server's constructor and
`start()`. Thread-safety: on the broker's loop only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from typing import Any

from sparklog.broker.config import BrokerConfig
from sparklog.broker.controller_client import ControllerClient, ProducerIdManager
from sparklog.broker.log_manager import LogManager
from sparklog.broker.metadata import BrokerMetadata
from sparklog.broker.replica_fetcher_manager import ReplicaFetcherManager
from sparklog.broker.replica_manager import ReplicaManager
from sparklog.errors import (
    BrokerIdNotRegisteredError,
    DuplicateBrokerRegistrationError,
    StaleBrokerEpochError,
)
from sparklog.protocol.server import KafkaServer
from sparklog.security.listeners import ListenerEndpoint

logger = logging.getLogger(__name__)

_FENCED_HEARTBEAT_INTERVAL_S = 0.05  # heartbeat fast until unfenced (Kafka: "immediately")
_GOODBYE_TIMEOUT_S = 2.0
_SHUTDOWN_HEARTBEAT_ATTEMPTS = 3  # an unreachable controller ends a controlled shutdown


class BrokerLifecycleManager:
    """Registration, heartbeats and the controlled shutdown of one broker (see module doc)."""

    # the broker's collaborators (set by `BrokerServer`)
    node_id: int
    config: BrokerConfig
    controller: ControllerClient
    controller_bootstrap: str
    metadata: BrokerMetadata
    log_manager: LogManager
    replica_manager: ReplicaManager
    fetchers: ReplicaFetcherManager
    producer_ids: ProducerIdManager
    server: KafkaServer
    _tasks: list[asyncio.Task]
    # the state of the lease
    broker_epoch: int
    _previous_broker_epoch: int
    incarnation_id: uuid.UUID
    stop_reason: str | None
    _want_shut_down: bool
    _unfenced: asyncio.Event | None
    _shutdown_requested: asyncio.Event | None
    _heartbeat_now: asyncio.Event | None
    _shut_down_granted: asyncio.Event | None

    def advertised_endpoints(self) -> tuple[ListenerEndpoint, ...]:
        raise NotImplementedError  # the broker's: what it registers

    async def _retry(self, call: Any) -> Any:
        """Call the controller until it answers (it may still be starting)."""
        delay = 0.05
        while True:
            try:
                return await call()
            except (ConnectionError, OSError) as e:
                logger.debug("controller %s not reachable yet: %s", self.controller_bootstrap, e)
                await asyncio.sleep(delay)
                delay = min(1.0, delay * 2)

    async def _wait_unfenced(self) -> None:
        """Until the controller unfences us; a stop requested meanwhile fails the start."""
        assert self._unfenced is not None and self._shutdown_requested is not None
        unfenced = asyncio.ensure_future(self._unfenced.wait())
        stopping = asyncio.ensure_future(self._shutdown_requested.wait())
        try:
            await asyncio.wait([unfenced, stopping], return_when=asyncio.FIRST_COMPLETED)
        finally:
            unfenced.cancel()
            stopping.cancel()
        if not self._unfenced.is_set():
            raise RuntimeError(f"broker {self.node_id} stopped while starting: {self.stop_reason}")

    async def _register(self) -> None:
        """BrokerRegistration; a live older incarnation makes us retry until its lease ends."""
        endpoints = self.advertised_endpoints()
        loop = asyncio.get_running_loop()
        give_up_at = loop.time() + 3 * self.config.broker_session_timeout_ms / 1000
        while True:
            code, epoch = await self._retry(
                lambda: self.controller.register(
                    broker_id=self.node_id,
                    cluster_id=self.metadata.cluster_id or "",
                    incarnation_id=self.incarnation_id,
                    endpoints=endpoints,
                    rack=self.config.broker_rack,
                    # KIP-966: this process's epoch when it registers again, else the epoch
                    # its data dir's clean shutdown marker held (-1: none, maybe a power loss)
                    previous_broker_epoch=self.broker_epoch
                    if self.broker_epoch >= 0
                    else self._previous_broker_epoch,
                )
            )
            if code == 0:
                self.broker_epoch = epoch
                self.producer_ids.broker_epoch = epoch
                logger.info("broker %d registered with epoch %d", self.node_id, epoch)
                return
            if code != DuplicateBrokerRegistrationError.code:
                raise RuntimeError(f"broker {self.node_id}: registration refused with error {code}")
            if loop.time() > give_up_at:  # a lease would have run out: a live process holds it
                raise RuntimeError(
                    f"broker {self.node_id}: another live process holds this broker id (a newer "
                    "Spark task attempt, or a second broker started with the same id); this "
                    "one stops"
                )
            logger.info("broker %d: another incarnation still holds the id; retrying", self.node_id)
            await asyncio.sleep(self.config.broker_heartbeat_interval_ms / 1000)

    async def _heartbeat_loop(self) -> None:
        failures = 0
        interval_s = self.config.broker_heartbeat_interval_ms / 1000
        while True:
            want_shut_down = self._want_shut_down
            try:
                response = await self.controller.heartbeat(
                    broker_id=self.node_id,
                    broker_epoch=self.broker_epoch,
                    metadata_offset=self.metadata.published_offset,
                    want_shut_down=want_shut_down,
                    want_fence=self.log_manager.dir_failures.offline,
                )
            except (ConnectionError, OSError, TimeoutError) as e:
                failures += 1
                if failures == 1 or failures % 50 == 0:
                    logger.warning(
                        "broker %d: heartbeat failed (%d times): %s", self.node_id, failures, e
                    )
                if want_shut_down and failures >= _SHUTDOWN_HEARTBEAT_ATTEMPTS:
                    assert self._shut_down_granted is not None
                    self._shut_down_granted.set()  # no controller to hand anything over to
                    return
                await self._heartbeat_pause(
                    _FENCED_HEARTBEAT_INTERVAL_S if want_shut_down else interval_s
                )
                continue
            failures = 0
            lost = response.error_code in (
                StaleBrokerEpochError.code,
                BrokerIdNotRegisteredError.code,
            )
            if lost and not response.should_shut_down:
                logger.warning("broker %d: registration lost; registering again", self.node_id)
                await self._register()
                continue
            pause_s = self._on_heartbeat(response, want_shut_down)
            if pause_s is None:
                return
            await self._heartbeat_pause(pause_s)

    def _on_heartbeat(self, response: Any, want_shut_down: bool) -> float | None:
        """Act on a heartbeat answer; the pause before the next one (None: stop heartbeating)."""
        assert self._unfenced is not None and self._shutdown_requested is not None
        assert self._shut_down_granted is not None
        if response.should_shut_down:
            if response.error_code:  # a newer incarnation took our id: nothing to hand over
                self.stop_reason = (
                    f"the controller asked this broker to shut down (error "
                    f"{response.error_code}: a newer registration)"
                )
            elif not want_shut_down and self.stop_reason is None:
                self.stop_reason = "the controller asked this broker to shut down"
            self._shutdown_requested.set()
            if want_shut_down or response.error_code:
                self._shut_down_granted.set()  # the controlled shutdown is complete
                return None
            self._want_shut_down = True  # go on: hand our leaderships over first
            return 0.0
        if response.error_code:
            logger.warning(
                "broker %d: heartbeat refused (error %d)", self.node_id, response.error_code
            )
        elif not response.is_fenced:
            self._unfenced.set()
        if response.is_fenced or want_shut_down:
            return _FENCED_HEARTBEAT_INTERVAL_S
        return self.config.broker_heartbeat_interval_ms / 1000

    def _on_log_dir_offline(self) -> None:
        """Stop following (nothing more is written) and ask the controller to fence us now,
        so our leaderships move to replicas on healthy disks."""
        for tp in self.replica_manager.partitions:
            self.fetchers.remove_partition(tp)
        if self._heartbeat_now is not None:
            self._heartbeat_now.set()

    async def _heartbeat_pause(self, interval_s: float) -> None:
        """Sleep until the next heartbeat, or until a shutdown wants one sent now."""
        assert self._heartbeat_now is not None
        self._heartbeat_now.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(interval_s):
                await self._heartbeat_now.wait()

    async def _controlled_shutdown(self) -> None:
        """Kafka's KRaft controlled shutdown: heartbeat `want_shut_down` (still serving and
        fetching) until the controller, having moved our leaderships, answers should_shut_down;
        at most one session timeout, after which the controller fences us by lease anyway."""
        if self.broker_epoch < 0:
            return
        assert self._shut_down_granted is not None and self._heartbeat_now is not None
        self._want_shut_down = True
        if self._shut_down_granted.is_set():
            return
        heartbeating = any(
            t.get_name().endswith("-heartbeat") and not t.done() for t in self._tasks
        )
        if not heartbeating or not self.config.controlled_shutdown_enable:
            await self._say_goodbye()  # at least have the controller fence us at once
            return
        self._heartbeat_now.set()
        timeout_s = max(_GOODBYE_TIMEOUT_S, self.config.broker_session_timeout_ms / 1000)
        try:
            async with asyncio.timeout(timeout_s):
                await self._shut_down_granted.wait()
        except TimeoutError:
            logger.warning(
                "broker %d: the controller did not finish the controlled shutdown in %.1f s; "
                "stopping anyway",
                self.node_id,
                timeout_s,
            )

    async def _say_goodbye(self) -> None:
        """One `want_shut_down` heartbeat (no heartbeat task to carry the handshake)."""
        with contextlib.suppress(Exception):
            async with asyncio.timeout(_GOODBYE_TIMEOUT_S):
                await self.controller.heartbeat(
                    broker_id=self.node_id,
                    broker_epoch=self.broker_epoch,
                    metadata_offset=self.metadata.published_offset,
                    want_shut_down=True,
                )
