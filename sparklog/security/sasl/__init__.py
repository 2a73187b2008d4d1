"""SASL on the server: sans-IO mechanisms (PLAIN, SCRAM-SHA-256/512, OAUTHBEARER) and the
per-listener set of them an authenticator draws from.

- `mechanism`: the `SaslServer` protocol and the two failure kinds.
- `plain`, `scram`, `oauthbearer`: the mechanisms (Kafka's `PlainSaslServer`,
  `ScramSaslServer`, `OAuthBearerSaslServer`).
- `client` (owned by the client side): the client state machines.

`SaslMechanisms` is what a SASL listener is configured with: the enabled mechanism names in
order (`sasl.enabled.mechanisms`) and what each needs (PLAIN's users from the JAAS config,
SCRAM's credential store, OAUTHBEARER's token validator; `enabled`). It makes a fresh
`SaslServer` per exchange.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparklog.lazy_names import lazy_getattr

_MODULES = {
    "SUPPORTED_MECHANISMS": "sparklog.security.sasl.enabled",
    "SaslMechanisms": "sparklog.security.sasl.enabled",
    "SaslError": "sparklog.security.sasl.mechanism",
    "SaslServer": "sparklog.security.sasl.mechanism",
}
__all__ = ["SUPPORTED_MECHANISMS", "SaslError", "SaslMechanisms", "SaslServer"]
__getattr__ = lazy_getattr(__name__, _MODULES)

if TYPE_CHECKING:
    from sparklog.security.sasl.enabled import SUPPORTED_MECHANISMS, SaslMechanisms
    from sparklog.security.sasl.mechanism import SaslError, SaslServer
