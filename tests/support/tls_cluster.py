"""A sparklog cluster whose brokers serve TLS to clients (`listeners=SSL://...`), for tests of
real clients over TLS: the SSL listener's server also records the principals it served."""

from __future__ import annotations

from sparklog.broker.server import BrokerServer
from sparklog.cluster.embedded import EmbeddedCluster
from sparklog.protocol.pipeline import RequestStage

RULES = "RULE:^CN=([^,]+),OU=tests,.*$/$1/,DEFAULT"


class Principals(RequestStage):
    """Records the principal of every request (a measure-slot stage)."""

    name = "measure"

    def __init__(self) -> None:
        self.seen: set[str] = set()

    def on_request(self, request):
        self.seen.add(str(request.session.principal))


class TlsCluster(EmbeddedCluster):
    """An embedded cluster whose brokers serve clients on an SSL listener (mTLS required),
    configured as a Kafka broker is: `listeners=SSL://...,PLAINTEXT://...` with the `ssl.*`
    settings and `ssl.principal.mapping.rules`; brokers replicate over the PLAINTEXT one."""

    def __init__(self, ca, *args, config=None, **kwargs) -> None:
        tls = {
            "listeners": "SSL://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
            "inter.broker.listener.name": "PLAINTEXT",
            **ca.server_props(client_auth="required"),
            "ssl.principal.mapping.rules": RULES,
        }
        super().__init__(*args, config={**(config or {}), **tls}, **kwargs)
        self.principals = Principals()

    def _new_broker(self, node_id: int) -> BrokerServer:
        broker = super()._new_broker(node_id)
        server = broker.servers["SSL"]
        server.pipeline = server.pipeline.with_stage(self.principals)
        return broker
