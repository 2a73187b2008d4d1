"""Who is asking: the principal and the connection facts every request carries.

Kafka keeps these in `RequestContext` (listener name, security protocol, principal, client
address, client id) and `Session` (principal, client address), built by the network layer from
the channel once it is authenticated. A PLAINTEXT channel is authenticated as soon as it is
open, as `User:ANONYMOUS` (Kafka's `DefaultKafkaPrincipalBuilder` for a plaintext transport);
TLS and SASL principals come with the security issue.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final


class SecurityProtocol(enum.IntEnum):
    """Kafka's `SecurityProtocol` (the values of `security.protocol` and of
    `listener.security.protocol.map`), with its ids."""

    PLAINTEXT = 0
    SSL = 1
    SASL_PLAINTEXT = 2
    SASL_SSL = 3


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    """An authenticated identity, `type:name` as ACLs name it (Kafka's `KafkaPrincipal`)."""

    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"


USER_TYPE: Final = "User"
#: The principal of an unauthenticated (PLAINTEXT) channel.
ANONYMOUS: Final = KafkaPrincipal(USER_TYPE, "ANONYMOUS")


@dataclass(frozen=True, slots=True)
class Session:
    """The facts about one request's sender that policy (authorization, quotas, audit) reads.

    `client_address` is the peer's IP ("" when unknown, e.g. a request built in-process);
    `client_id` is the request header's.
    """

    principal: KafkaPrincipal = ANONYMOUS
    listener_name: str = "PLAINTEXT"
    security_protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT
    client_address: str = ""
    client_port: int = -1
    client_id: str | None = None

    @property
    def client_host(self) -> str:
        """The client host as Kafka's group APIs answer it ("/127.0.0.1"), "" when unknown."""
        return f"/{self.client_address}" if self.client_address else ""


#: The session of a request that did not come over a socket (tests, in-process calls).
LOCAL_SESSION: Final = Session()
