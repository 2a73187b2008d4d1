"""How the Apache Kafka oracle is secured: Kafka's own settings for SASL_SSL, mTLS and ACLs.

`OracleSecurity` describes one secured cluster; `ApacheKafka(..., security=...)` then serves
three listeners instead of one PLAINTEXT listener (Kafka's names, as docs/security.html sets
them up for KRaft):

  SASL_SSL    clients and inter-broker traffic; SCRAM-SHA-512, SCRAM-SHA-256 and PLAIN. SCRAM
              users are created at format time (`kafka-storage format --add-scram`, KIP-900:
              the credentials are bootstrap metadata records, so they exist before any broker
              starts); PLAIN users come from the listener's `PlainLoginModule` JAAS options.
              Brokers authenticate to each other with PLAIN as the admin user (SCRAM would
              work too once the metadata is loaded; PLAIN needs nothing from the log).
  SSL         mTLS: `ssl.client.auth=required`; the peer's subject is mapped to a principal by
              `ssl.principal.mapping.rules` (default here: the CN, so `CN=alice,...` is
              `User:alice`, the same principal as the SCRAM user alice).
  CONTROLLER  SASL_PLAINTEXT with PLAIN (KRaft controllers cannot take SCRAM: the credentials
              live in the log the controller serves); the admin user, a super user, is the
              broker's identity there, which the controller's CLUSTER_ACTION checks require.

With `authorizer=True` every node runs Kafka's `StandardAuthorizer` with `super.users` and
`allow.everyone.if.no.acl.found=false` (Kafka's default), so a user sees only what its ACLs
grant. Passwords are test fixtures; they are written into the node's properties file, which is
the only way Kafka takes them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

SCRAM_MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256")
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
#: `CN=alice,OU=clients,O=...` -> `alice` (Kafka's SslPrincipalMapper rule syntax)
CN_RULE = "RULE:^CN=([^,]+),.*$/$1/,DEFAULT"

#: the listeners a secured oracle serves, in `listeners` order (CONTROLLER on node 1 only)
SASL_SSL = "SASL_SSL"
SSL = "SSL"
CLIENT_LISTENERS = (SASL_SSL, SSL)


@dataclass(frozen=True)
class OracleSecurity:
    """A secured oracle cluster: the broker's `ssl.*` settings, the CA clients trust, users."""

    ca_file: Path  # PEM: the CA the admin client (and every other client) trusts
    server_ssl: Mapping[str, str]  # the broker's ssl.keystore.* / ssl.truststore.* / ssl.key.*
    scram_users: Mapping[str, str] = field(default_factory=dict)  # name -> password
    plain_users: Mapping[str, str] = field(default_factory=dict)  # name -> password
    admin_user: str = "admin"
    admin_password: str = "admin-secret"
    super_users: tuple[str, ...] = ()  # more than the admin user, as principals `User:x`
    authorizer: bool = True
    principal_mapping_rules: str = CN_RULE

    def __repr__(self) -> str:  # no passwords in test reports
        return (
            f"OracleSecurity(scram_users={sorted(self.scram_users)}, "
            f"plain_users={sorted(self.plain_users)}, authorizer={self.authorizer})"
        )

    def properties(self, ports: Mapping[str, int], controller_port: int | None) -> dict[str, str]:
        """The settings of one node; `controller_port` only on the combined node."""
        listeners = [f"{name}://127.0.0.1:{ports[name]}" for name in CLIENT_LISTENERS]
        advertised = ",".join(listeners)
        if controller_port is not None:
            listeners.append(f"CONTROLLER://127.0.0.1:{controller_port}")
        admin = f'username="{self.admin_user}" password="{self.admin_password}"'
        plain_users = {self.admin_user: self.admin_password, **self.plain_users}
        user_options = " ".join(f'user_{u}="{p}"' for u, p in plain_users.items())
        props = {
            "listeners": ",".join(listeners),
            "advertised.listeners": advertised,
            "listener.security.protocol.map": (
                "SASL_SSL:SASL_SSL,SSL:SSL,CONTROLLER:SASL_PLAINTEXT"
            ),
            "inter.broker.listener.name": SASL_SSL,
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "sasl.mechanism.controller.protocol": "PLAIN",
            "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.controller.plain.sasl.jaas.config": (
                f'{PLAIN_MODULE} required {admin} user_{self.admin_user}="{self.admin_password}";'
            ),
            "listener.name.sasl_ssl.sasl.enabled.mechanisms": ",".join(
                (*SCRAM_MECHANISMS, "PLAIN")
            ),
            "listener.name.sasl_ssl.plain.sasl.jaas.config": (
                f"{PLAIN_MODULE} required {admin} {user_options};"
            ),
            **{k: v for k, v in self.server_ssl.items() if k != "ssl.client.auth"},
            "listener.name.ssl.ssl.client.auth": "required",
            "ssl.principal.mapping.rules": self.principal_mapping_rules,
        }
        for mechanism in SCRAM_MECHANISMS:
            props[f"listener.name.sasl_ssl.{mechanism.lower()}.sasl.jaas.config"] = (
                f"{SCRAM_MODULE} required;"
            )
        if self.authorizer:
            supers = (f"User:{self.admin_user}", *self.super_users)
            props["authorizer.class.name"] = STANDARD_AUTHORIZER
            props["super.users"] = ";".join(supers)
            props["allow.everyone.if.no.acl.found"] = "false"
        return props

    def format_arguments(self) -> list[str]:
        """`kafka-storage format` arguments creating every SCRAM user with both mechanisms."""
        args: list[str] = []
        for user, password in self.scram_users.items():
            for mechanism in SCRAM_MECHANISMS:
                args += ["--add-scram", f"{mechanism}=[name={user},password={password}]"]
        return args

    def admin_client_config(self, bootstrap_servers: str) -> dict[str, str]:
        """librdkafka settings for the admin user over SASL_SSL (PLAIN: exists from the start)."""
        return {
            "bootstrap.servers": bootstrap_servers,
            "security.protocol": "SASL_SSL",
            "sasl.mechanisms": "PLAIN",
            "sasl.username": self.admin_user,
            "sasl.password": self.admin_password,
            "ssl.ca.location": str(self.ca_file),
        }
