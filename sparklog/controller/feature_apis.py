"""UpdateFeatures (KIP-584, KIP-778): `kafka-features.sh upgrade|downgrade|disable`.

Brokers forward the request here, as Kafka's brokers forward it to the active controller; it
needs ALTER on the cluster (`metadata.admin_authz`). Each feature update is checked as Kafka's
`FeatureControlManager.updateFeature` checks it, in the same order and with its messages
("Invalid update version L for feature F. ..."): a known upgrade type, a level of at least 0,
a feature and level this controller supports (`SUPPORTED_FEATURES`; the brokers run the same
code), no lower level without a (safe or unsafe) downgrade type, no higher one with it. The
records of the accepted updates are committed in one batch (`QuorumController.update_features`
writes them; lowering `eligible.leader.replicas.version` to 0 also clears every ELR);
`validate_only` commits nothing. v0 has `allow_downgrade` (a safe downgrade) where v1 has the
upgrade type; v2's response has no per-feature results, its top-level error is the first
failed update's.
"""

from __future__ import annotations

import logging
from typing import Any

from sparklog.controller.controller_context import ControllerContext
from sparklog.controller.results import ControllerResult
from sparklog.errors import InvalidUpdateVersionError
from sparklog.metadata.image import SUPPORTED_FEATURES
from sparklog.protocol import kio_build
from sparklog.protocol.connection import Request
from sparklog.structs import CONTROLLER_NODE_ID

logger = logging.getLogger(__name__)

#: FeatureUpdate.UpgradeType's wire values
UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3

Outcome = tuple[int, str | None]  # (error code, message)


def _upgrade_type(update: Any) -> int:
    if hasattr(update, "upgrade_type"):
        return int(update.upgrade_type)
    return SAFE_DOWNGRADE if update.allow_downgrade else UPGRADE  # v0


def check_update(name: str, level: int, upgrade_type: int, current: int) -> str | None:
    """Why Kafka's controller refuses this update (the text after "Invalid update version L for
    feature F. "), or None when it is accepted."""
    if upgrade_type not in (UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE):
        return "The controller does not support the given upgrade type."
    if level < 0:
        return "A feature version cannot be less than 0."
    supported = SUPPORTED_FEATURES.get(name)
    if supported is None:
        if level == 0:
            return None  # disabling a feature nobody has: a no-op, as in Kafka
        return f"Local controller {CONTROLLER_NODE_ID} does not support this feature."
    low, high = supported
    if not low <= level <= high:
        return f"Local controller {CONTROLLER_NODE_ID} only supports versions {low}-{high}"
    if level < current and upgrade_type == UPGRADE:
        return (
            "Can't downgrade the version of this feature without setting the upgrade type to "
            "either safe or unsafe downgrade."
        )
    if level > current and upgrade_type != UPGRADE:
        return "Can't downgrade to a newer version."
    return None


async def handle_update_features(server: ControllerContext, request: Request) -> Any:
    controller = server.controller
    assert controller is not None  # handlers run once the server started
    body = request.body
    updates = [
        (u.feature, int(u.max_version_level), _upgrade_type(u)) for u in body.feature_updates
    ]
    validate_only = bool(getattr(body, "validate_only", False))

    def operation() -> ControllerResult[dict[str, Outcome]]:
        results: dict[str, Outcome] = {}
        records: list[dict[str, Any]] = []
        for name, level, upgrade_type in updates:
            current = controller.image.finalized_features.get(name, 0)
            reason = check_update(name, level, upgrade_type, current)
            if reason is not None:
                message = f"Invalid update version {level} for feature {name}. {reason}"
                results[name] = (InvalidUpdateVersionError.code, message)
                continue
            results[name] = (0, None)
            if name in SUPPORTED_FEATURES:
                records.extend(controller.update_features(name, level).records)
        return ControllerResult(results, () if validate_only else tuple(records))

    results = await server.commit(operation)
    logger.info(
        "UpdateFeatures%s from %s: %s",
        " (validate only)" if validate_only else "",
        request.context.session.principal,
        "; ".join(f"{name}: {code}" for name, (code, _) in results.items()),
    )
    failed = [outcome for outcome in results.values() if outcome[0]]
    top_code, top_message = failed[0] if failed and request.api_version >= 2 else (0, None)
    return kio_build.response(
        request,
        {
            "error_code": top_code,
            "error_message": top_message,
            "results": [
                {"feature": name, "error_code": code, "error_message": message}
                for name, (code, message) in sorted(results.items())
            ],
        },
    )
