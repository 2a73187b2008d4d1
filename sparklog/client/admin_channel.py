"""How admin calls reach the cluster: deadlines, retries, the controller, errors.

`AdminClient` and the admin call modules (e.g. `admin_reassignments`) share one `AdminChannel`
(Kafka's `KafkaAdminClient` keeps the same plumbing apart from its calls): requests go to a
given node, to any broker, or to the controller (which any broker forwards to); retriable
errors are retried with `retry.backoff.ms` until `default.api.timeout.ms` (or the call's
`timeout_ms`), and a response's first per-item error is raised naming the item. Items a
controller refused with THROTTLING_QUOTA_EXCEEDED (KIP-599's controller mutation quota) are
sent again alone once the response's throttle time has passed, as Kafka's admin client does
with `retryOnQuotaViolation` (its default): the others are done and must not be sent twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from sparklog.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    InvalidRequestError,
    KafkaError,
    NotControllerError,
    RequestTimedOutError,
    ThrottlingQuotaExceededError,
    error_for_code,
)
from sparklog.protocol.api_versions import ApiKey

from .broker_connection import now_ms
from .metadata import Metadata
from .network import NetworkClient
from .throttle import response_throttle_ms

#: Result errors an admin call retries (Kafka's `KafkaAdminClient` reschedules on these); other
#: errors in a result are final even when their class is retriable (e.g. an unknown topic).
_ADMIN_RETRY_CODES = frozenset(
    {
        RequestTimedOutError.code,
        CoordinatorLoadInProgressError.code,
        CoordinatorNotAvailableError.code,
        NotControllerError.code,
        ThrottlingQuotaExceededError.code,
    }
)


def admin_error(
    code: int, what: str, message: str | None = None, *, final: bool = False
) -> KafkaError:
    """The exception for Kafka error `code` about `what` (not retried when `final`)."""
    cls = error_for_code(code)
    error = cls(f"{cls.__name__} for {what}" + (f": {message}" if message else ""))
    if final:
        error.retriable = False
    return error


def retry_until(deadline_ms: int, backoff_ms: int, attempt: Callable[[], Any]) -> Any:
    """Call `attempt` until it returns without a retriable KafkaError or the deadline passes."""
    while True:
        try:
            return attempt()
        except KafkaError as e:
            if not e.retriable:
                raise
            if now_ms() + backoff_ms >= deadline_ms:
                raise RequestTimedOutError(f"gave up at the api timeout; last error: {e}") from e
        time.sleep(backoff_ms / 1000)


def raise_first(results: Iterable[tuple[str, Any, str | None]], what: str) -> None:
    """Raise the first (name, error code, message) whose code is not 0."""
    for name, code, message in results:
        if int(code) != 0:
            final = int(code) not in _ADMIN_RETRY_CODES
            raise admin_error(int(code), f"{what} {name!r}", message, final=final)


class AdminChannel:
    """The network client, cluster metadata and settings of one admin client. Thread-safe."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.config = config
        self.network = NetworkClient(config)
        self.metadata = Metadata(self.network, config, allow_auto_create=False)

    def close(self) -> None:
        self.network.close()

    def deadline(self, timeout_ms: int | None) -> int:
        """When a call with `timeout_ms` (None: `default.api.timeout.ms`) gives up."""
        return now_ms() + (
            self.config["default.api.timeout.ms"] if timeout_ms is None else timeout_ms
        )

    def timeout_field(self, timeout_ms: int | None) -> int:
        """The `timeout` a request carries to the broker."""
        return self.config["request.timeout.ms"] if timeout_ms is None else timeout_ms

    def retry(self, deadline_ms: int, attempt: Callable[[], Any]) -> Any:
        return retry_until(deadline_ms, self.config["retry.backoff.ms"], attempt)

    def any_node(self) -> int:
        node = self.network.least_loaded_node(self.metadata.candidates())
        if node is None:
            raise InvalidRequestError("no broker address is known")
        return node

    def controller_node(self) -> int:
        """Where topic changes go: the controller Metadata names, else any broker (which
        forwards them to the controller)."""
        cluster = self.metadata.cluster
        if cluster.controller_id in cluster.brokers:
            return cluster.controller_id
        return self.any_node()

    def request(
        self, node: int, api_key: int, fields: Mapping[str, Any], timeout_ms: int | None = None
    ) -> Any:
        """Send one request to `node` and wait for its response (a failure refreshes metadata)."""
        future = self.network.send(node, api_key, fields, timeout_ms=timeout_ms)
        try:
            return future.result()
        except KafkaError:
            self.metadata.request_update()
            raise

    def controller_call(
        self,
        api_key: ApiKey,
        fields: dict[str, Any],
        timeout_ms: int | None,
        results: Callable[[Any], Iterable[tuple[str, Any, str | None]]],
        what: str,
        narrow: Callable[[dict[str, Any], set[str]], dict[str, Any]] | None = None,
    ) -> None:
        """Send an admin request to the controller (retrying retriable errors until the
        deadline) and raise the first per-item error its response carries. With `narrow`
        (the request's fields cut down to the named items), items refused for the controller
        mutation quota are retried alone after the throttle time (KIP-599)."""
        deadline = self.deadline(timeout_ms)
        pending = fields

        def attempt() -> None:
            nonlocal pending
            node = self.controller_node()
            wait_ms = min(self.network.throttle_delay_ms(node), deadline - now_ms())
            if wait_ms > 0:  # KIP-219: the broker mutes us meanwhile anyway
                time.sleep(wait_ms / 1000)
            response = self.request(node, api_key, pending, timeout_ms)
            items = list(results(response))
            throttled = {n for n, c, _ in items if int(c) == ThrottlingQuotaExceededError.code}
            if narrow is None or not throttled:
                raise_first(items, what)
                return
            raise_first([i for i in items if i[0] not in throttled], what)
            pending = narrow(pending, throttled)  # the others are done: never send them again
            error = admin_error(
                ThrottlingQuotaExceededError.code,
                f"{what} {sorted(throttled)[0]!r}",
                f"over the controller mutation quota; throttled "
                f"{response_throttle_ms(response)} ms (controller_mutation_rate)",
            )
            if now_ms() >= deadline:
                error.retriable = False
            raise error

        try:
            self.retry(deadline, attempt)
        except RequestTimedOutError as e:
            if isinstance(e.__cause__, ThrottlingQuotaExceededError):
                raise e.__cause__ from None  # as Kafka's: the quota error, not a timeout
            raise

    def ensure_broker_address(self, node_id: int) -> None:
        """Know broker `node_id`'s address, or raise InvalidRequestError."""
        if node_id not in self.network.nodes():
            self.metadata.request_metadata([])
        if node_id not in self.network.nodes():
            raise InvalidRequestError(f"broker {node_id} is not in the cluster")
