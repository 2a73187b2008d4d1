"""What a controller operation returns: a response plus the metadata records to persist
(Kafka's `ControllerResult`), and per-resource errors (Kafka's `ApiError`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from sparklog.errors import KafkaError

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ControllerResult(Generic[T]):
    """`response` may be announced only after every record in `records` was appended to the
    metadata log (one batch, atomically) and applied with `QuorumController.replay`."""

    response: T
    records: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True, slots=True)
class ApiError:
    """A Kafka error code and message for one resource of a request; code 0 = success."""

    code: int = 0
    message: str | None = None

    @property
    def is_success(self) -> bool:
        return self.code == 0

    @classmethod
    def of(cls, error: KafkaError) -> ApiError:
        return cls(error.code, str(error))


NONE = ApiError()
