"""Incremental fetch sessions, the fetcher's side (KIP-227; Kafka's `FetchSessionHandler`).

One handler per connection to a broker. `build` takes the partitions to fetch this round, with
their fetch parameters, and says what the request carries: the session id and epoch, the
partitions to send (all of them in a full fetch; in an incremental one only those that are new
or whose parameters changed) and the partitions to forget. `handle_response` checks the answer
against the session and moves the session on; after a refusal (an unknown session, a wrong
epoch, partitions nobody asked for) the next request is a full fetch that starts a new session.

Sans-IO: no sockets, no clock; the caller sends what `build` says.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from sparklog.errors import FetchSessionIdNotFoundError, InvalidFetchSessionEpochError

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
_INT32_MAX = 2**31 - 1

#: Top-level Fetch errors about the session itself: no user error, the next Fetch is full.
SESSION_ERRORS = frozenset({FetchSessionIdNotFoundError.code, InvalidFetchSessionEpochError.code})

K = TypeVar("K")  # a partition key, e.g. (topic, partition)
V = TypeVar("V")  # its fetch parameters; equal values are not sent again


def next_epoch(epoch: int) -> int:
    """The session epoch after `epoch`: full-fetch epochs stay put, and 2^31-1 wraps to 1."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == _INT32_MAX else epoch + 1


def forgotten_topics(partitions: Iterable[tuple[str, int]]) -> list[dict[str, Any]]:
    """Fetch's `forgotten_topics_data` for (topic, partition) keys, grouped by topic."""
    grouped: dict[str, list[int]] = {}
    for topic, partition in partitions:
        grouped.setdefault(topic, []).append(partition)
    return [{"topic": topic, "partitions": ps} for topic, ps in grouped.items()]


@dataclass(frozen=True, slots=True)
class FetchRequestData(Generic[K, V]):
    """What one Fetch request carries."""

    session_id: int
    epoch: int
    to_send: dict[K, V]
    to_forget: list[K]

    @property
    def is_full(self) -> bool:
        return self.epoch in (INITIAL_EPOCH, FINAL_EPOCH)


class FetchSessionHandler(Generic[K, V]):
    """The session with one broker, as its fetcher sees it."""

    def __init__(self) -> None:
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self._partitions: dict[K, V] = {}  # what the broker's session holds

    def build(self, wanted: Mapping[K, V]) -> FetchRequestData[K, V]:
        """The request for fetching `wanted` this round."""
        if self.epoch == INITIAL_EPOCH:
            self._partitions = dict(wanted)
            return FetchRequestData(self.session_id, INITIAL_EPOCH, dict(wanted), [])
        to_send = {k: v for k, v in wanted.items() if self._partitions.get(k, _MISSING) != v}
        to_forget = [k for k in self._partitions if k not in wanted]
        self._partitions = dict(wanted)
        return FetchRequestData(self.session_id, self.epoch, to_send, to_forget)

    def handle_response(
        self,
        request: FetchRequestData[K, V],
        error_code: int,
        session_id: int,
        answered: Iterable[K],
    ) -> bool:
        """Move the session on after the response to `request`; False when the response must
        be ignored (its partitions are not to be trusted, or the broker refused the session)."""
        if error_code:
            if error_code == FetchSessionIdNotFoundError.code:
                self._reset()
            else:
                self.epoch = INITIAL_EPOCH  # close this session and ask for a new one
            return False
        if any(k not in self._partitions for k in answered):
            if request.is_full:
                self._reset()
            else:
                self.epoch = INITIAL_EPOCH
            return False
        if session_id == INVALID_SESSION_ID:  # no session (any more): full fetches from now on
            self._reset()
        elif request.is_full:
            self.session_id, self.epoch = session_id, next_epoch(INITIAL_EPOCH)
        else:
            self.epoch = next_epoch(self.epoch)
        return True

    def handle_error(self) -> None:
        """The request failed (a broken connection): close the session on the next request."""
        self.epoch = INITIAL_EPOCH

    def _reset(self) -> None:
        self.session_id, self.epoch = INVALID_SESSION_ID, INITIAL_EPOCH


_MISSING = object()
