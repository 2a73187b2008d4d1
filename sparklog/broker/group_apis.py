"""NOT_COORDINATOR in the shape of a group or transaction API's response: what a broker answers
when it cannot forward a request to the driver's coordinator (it sends the client back to
FindCoordinator; `coordinator_forwarding`). The shapes (`refusal`) are in `protocol.responses`,
since the coordinator answers with them too (COORDINATOR_NOT_AVAILABLE while its table cannot
load)."""

from __future__ import annotations

from typing import Any

from sparklog.errors import NotCoordinatorError
from sparklog.protocol.connection import Request
from sparklog.protocol.responses import refusal


async def handle_not_coordinator(request: Request) -> Any:
    """NOT_COORDINATOR in the shape of the request's response."""
    return refusal(request, NotCoordinatorError.code)
