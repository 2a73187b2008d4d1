"""The transaction coordinator's settings, with Kafka's names and defaults
(`TransactionStateManagerConfig`, `TransactionLogConfig`), declared into the settings
registry."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from sparklog.settings import ConfigType, Range, Scope, Setting, define


def _txn(name: str, default: int, doc: str, rule: Range | None = None) -> Setting:
    return Setting(
        name, ConfigType.INT, default, rule, doc=doc, scope=Scope.COORDINATOR, group="transaction"
    )


TRANSACTION_SETTINGS = define(
    _txn(
        "transaction.max.timeout.ms",
        900_000,
        "the longest transaction.timeout.ms a producer may ask",
        Range(1, text="positive"),
    ),
    _txn("transactional.id.expiration.ms", 604_800_000, "idle transactional ids are forgotten"),
    _txn(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        10_000,
        "how often timed-out transactions are aborted",
    ),
    _txn(
        "transaction.remove.expired.transaction.cleanup.interval.ms",
        3_600_000,
        "how often idle transactional ids expire",
    ),
    _txn(
        "transaction.marker.request.timeout.ms",
        30_000,
        "sparklog's own: a WriteTxnMarkers round that takes longer is retried",
    ),
)
_D = TRANSACTION_SETTINGS.default


@dataclasses.dataclass(frozen=True, slots=True)
class TransactionConfig:
    """Kafka's broker-side transaction settings; `from_properties` reads them by Kafka name."""

    transaction_max_timeout_ms: int = _D("transaction.max.timeout.ms")
    transactional_id_expiration_ms: int = _D("transactional.id.expiration.ms")
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = _D(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms"
    )
    transaction_remove_expired_transaction_cleanup_interval_ms: int = _D(
        "transaction.remove.expired.transaction.cleanup.interval.ms"
    )
    transaction_marker_request_timeout_ms: int = _D("transaction.marker.request.timeout.ms")

    @classmethod
    def from_properties(cls, props: Mapping[str, object]) -> TransactionConfig:
        """Settings from a Kafka-style properties dict; other keys are ignored."""
        return cls(**TRANSACTION_SETTINGS.parse(props, unknown="ignore"))
