"""A sparklog cluster whose brokers serve TLS on their one listener, for tests of real clients
over TLS until `listeners=SSL://...` is wired into the brokers (the listeners part): each
broker's KafkaServer is given the TLS context, the principal rules and a stage recording the
principals it served."""

from __future__ import annotations

from sparklog.broker.server import BrokerServer
from sparklog.cluster.embedded import EmbeddedCluster
from sparklog.protocol.pipeline import RequestStage
from sparklog.security.principal import PrincipalBuilder
from sparklog.security.session import SecurityProtocol
from sparklog.security.ssl_factory import SslConfig, server_context

RULES = "RULE:^CN=([^,]+),OU=tests,.*$/$1/,DEFAULT"


class Principals(RequestStage):
    """Records the principal of every request (a measure-slot stage)."""

    name = "measure"

    def __init__(self) -> None:
        self.seen: set[str] = set()

    def on_request(self, request):
        self.seen.add(str(request.session.principal))


class TlsCluster(EmbeddedCluster):
    """An embedded cluster whose brokers serve TLS on their one listener."""

    def __init__(self, ca, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        props = ca.server_props(client_auth="required")
        self.ssl_context = server_context(SslConfig.of(props))
        self.principals = Principals()

    def _new_broker(self, node_id: int) -> BrokerServer:
        broker = super()._new_broker(node_id)
        server = broker.server
        server.listener_name = "SSL"
        server.security_protocol = SecurityProtocol.SSL
        server.ssl_context = self.ssl_context
        server.principal_builder = PrincipalBuilder.of({"ssl.principal.mapping.rules": RULES})
        server.pipeline = server.pipeline.with_stage(self.principals)
        return broker
