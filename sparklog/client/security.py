"""The clients' security settings turned into what a connection needs (Kafka's
`ChannelBuilders.clientChannelBuilder`): `security.protocol`, `sasl.mechanism`,
`sasl.jaas.config` and `sasl.login.callback.handler.class` become one `ClientSecurity`; and
the blocking SASL exchange a new connection runs after ApiVersions.

Bad settings fail when the client is made (a `ConfigError` naming the setting and the fix),
not at the first connection, and never quote the JAAS text (it holds the password).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from sparklog.client.oauth import token_endpoint_provider
from sparklog.protocol.outbound import ClientSecurity
from sparklog.security.sasl.client import (
    OAUTHBEARER,
    SaslClientAuthenticator,
    SaslClientConfig,
    SaslRequest,
    login_options,
)
from sparklog.settings import ConfigError

logger = logging.getLogger(__name__)


def client_security(config: Mapping[str, Any]) -> ClientSecurity:
    """The `ClientSecurity` of a validated client config (`client.config`)."""
    protocol = config.get("security.protocol") or "PLAINTEXT"
    sasl = None
    try:
        if protocol.upper().startswith("SASL_"):
            mechanism = (config.get("sasl.mechanism") or "GSSAPI").upper()
            provider = _token_provider(config.get("sasl.login.callback.handler.class"))
            url = config.get("sasl.oauthbearer.token.endpoint.url")
            if provider is None and mechanism == OAUTHBEARER and url:
                jaas = config.get("sasl.jaas.config")
                provider = token_endpoint_provider(
                    url,
                    login_options(jaas) if jaas else {},
                    timeout_ms=config.get("sasl.login.read.timeout.ms")
                    or config.get("sasl.login.connect.timeout.ms"),
                )
            sasl = SaslClientConfig.from_jaas(
                mechanism, config.get("sasl.jaas.config"), token_provider=provider
            )
        return ClientSecurity.of(protocol, config, sasl=sasl)
    except ValueError as e:  # SaslConfigError, the JAAS parser's errors, ClientSecurity's
        raise ConfigError(str(e)) from None


def _token_provider(handler: Any) -> Callable[[], str] | None:
    if handler is None:
        return None
    if isinstance(handler, str):
        raise ConfigError(
            f"sasl.login.callback.handler.class={handler!r}: Java classes cannot run here; "
            "pass a Python callable returning the OAUTHBEARER token (a compact JWT)"
        )
    if not callable(handler):
        raise ConfigError(
            "sasl.login.callback.handler.class must be a callable returning the OAUTHBEARER "
            "token (a compact JWT)"
        )
    return handler


def authenticate(
    sasl: SaslClientConfig,
    authenticate_version: int,
    exchange: Callable[[SaslRequest], Any],
    now_ms: Callable[[], int],
) -> SaslClientAuthenticator:
    """Run SaslHandshake and SaslAuthenticate to completion over `exchange` (send one request,
    return its response); raises the Kafka error the server answered. The connection closes
    on failure (its caller's job), as Kafka's server does after a failed login."""
    auth = SaslClientAuthenticator(
        sasl, authenticate_version, now_ms(), wall_clock_ms=int(time.time() * 1000)
    )
    while (request := auth.next_request()) is not None:
        auth.on_response(exchange(request), now_ms())
    assert auth.complete  # on_response raised otherwise
    return auth
