"""AlterPartition: a partition leader asks the controller to change the ISR (KIP-497, KIP-903).

The leader never changes the ISR on its own: it proposes `IsrChange` (expected leader epoch and
partition epoch + the ISR it wants) and applies the controller's `IsrChangeOutcome`, whose
partition epoch is the new one on success. Shared by the broker (`controller_client`) and the
controller (`QuorumController.alter_partition`) so both sides speak the same values.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class IsrChange:
    """One partition's AlterPartition entry, as the leader sends it."""

    topic_id: uuid.UUID
    partition: int
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class IsrChangeOutcome:
    """The controller's answer for one partition: an error, or the partition's state now."""

    topic_id: uuid.UUID
    partition: int
    error_code: int = 0
    error_message: str | None = None
    leader_id: int = -1
    leader_epoch: int = -1
    isr: tuple[int, ...] = ()
    partition_epoch: int = -1


__all__ = ["IsrChange", "IsrChangeOutcome"]
