"""The transaction coordinator's settings, with Kafka's names and defaults
(`TransactionStateManagerConfig`, `TransactionLogConfig`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping


@dataclasses.dataclass(frozen=True, slots=True)
class TransactionConfig:
    """Kafka's broker-side transaction settings; `from_properties` reads them by Kafka name."""

    transaction_max_timeout_ms: int = 900_000
    transactional_id_expiration_ms: int = 604_800_000
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10_000
    transaction_remove_expired_transaction_cleanup_interval_ms: int = 3_600_000
    #: How long a WriteTxnMarkers round may take before the coordinator retries it.
    transaction_marker_request_timeout_ms: int = 30_000

    @classmethod
    def from_properties(cls, props: Mapping[str, object]) -> TransactionConfig:
        """Settings from a Kafka-style properties dict; other keys are ignored."""
        values: dict[str, int] = {}
        for f in dataclasses.fields(cls):
            key = f.name.replace("_", ".")
            if key in props:
                try:
                    values[f.name] = int(str(props[key]))
                except ValueError:
                    raise ValueError(f"{key}={props[key]!r} is not an integer") from None
        config = cls(**values)
        if config.transaction_max_timeout_ms <= 0:
            raise ValueError("transaction.max.timeout.ms must be positive")
        return config
