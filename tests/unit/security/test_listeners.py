"""Kafka's listener model: parsing, Kafka's validation messages, per-listener settings and
the per-listener security object (sparklog/security/listeners.py)."""

from __future__ import annotations

import json

import pytest

from sparklog.security.listener_config import ListenerConfig
from sparklog.security.listeners import (
    DEFAULT_BIND_HOST,
    ListenerEndpoint,
    ListenerSettings,
    listener_security,
    parse_listener_list,
    parse_protocol_map,
    plaintext,
)
from sparklog.security.session import SecurityProtocol
from sparklog.settings import REGISTRY, ConfigError

P = SecurityProtocol


def cfg(**props: str) -> ListenerConfig:
    return ListenerConfig.from_properties({k.replace("_", "."): v for k, v in props.items()})


def test_the_default_is_one_plaintext_listener_on_loopback():
    c = ListenerConfig.from_properties({})
    (only,) = c.listeners
    assert (only.listener_name, only.security_protocol, only.bind_host, only.port) == (
        "PLAINTEXT",
        P.PLAINTEXT,
        DEFAULT_BIND_HOST,
        0,
    )
    assert c.advertised == c.listeners == c.broker_listeners
    assert (c.inter_broker_listener_name, c.inter_broker_protocol) == ("PLAINTEXT", P.PLAINTEXT)


def test_protocol_names_are_listener_names_by_default_and_names_are_upper_cased():
    c = ListenerConfig.from_properties(
        {"listeners": "plaintext://127.0.0.1:9092,SASL_SSL://:9093,ssl://[::1]:9094"}
    )
    assert [(e.listener_name, e.security_protocol, e.host, e.port) for e in c.listeners] == [
        ("PLAINTEXT", P.PLAINTEXT, "127.0.0.1", 9092),
        ("SASL_SSL", P.SASL_SSL, "", 9093),
        ("SSL", P.SSL, "::1", 9094),
    ]
    assert str(c.listeners[2]) == "SSL://[::1]:9094"


def test_custom_names_need_the_protocol_map_with_kafkas_message():
    with pytest.raises(ConfigError) as e:
        ListenerConfig.from_properties({"listeners": "CLIENT://:9092"})
    assert str(e.value).startswith(
        "Error creating broker listeners from 'CLIENT://:9092': No security protocol defined "
        "for listener CLIENT"
    )
    c = ListenerConfig.from_properties(
        {
            "listeners": "CLIENT://:9092,REPLICATION://:9093",
            "listener.security.protocol.map": "client:SASL_SSL, Replication:ssl",
            "inter.broker.listener.name": "replication",
        }
    )
    assert c.protocol_map == {"CLIENT": P.SASL_SSL, "REPLICATION": P.SSL}
    assert (c.inter_broker_listener_name, c.inter_broker_protocol) == ("REPLICATION", P.SSL)


@pytest.mark.parametrize(
    ("props", "message"),
    [
        (
            {"listeners": "PLAINTEXT:9092"},
            "Error creating broker listeners from 'PLAINTEXT:9092': Unable to parse "
            "PLAINTEXT:9092 to a broker endpoint",
        ),
        (
            {"listeners": "PLAINTEXT://:9092,PLAINTEXT://:9093"},
            "Each listener must have a different name, listeners: "
            "PLAINTEXT://:9092,PLAINTEXT://:9093",
        ),
        (
            {"listeners": "PLAINTEXT://localhost:9091,SSL://localhost:9091"},
            "Each listener must have a different port",
        ),
        (
            {"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,X:TLS"},
            "Invalid security protocol `TLS` defined in listener.security.protocol.map",
        ),
        (
            {"listener.security.protocol.map": "PLAINTEXT"},
            "Error parsing configuration property 'listener.security.protocol.map'",
        ),
        (
            {"listener.security.protocol.map": "A:SSL,a:PLAINTEXT,PLAINTEXT:PLAINTEXT"},
            "listener A appears more than once",
        ),
        (
            {"inter.broker.listener.name": "INTERNAL"},
            "Listener with name INTERNAL defined in inter.broker.listener.name not found in "
            "listener.security.protocol.map.",
        ),
        (
            {"inter.broker.listener.name": "SSL"},
            "inter.broker.listener.name must be a listener name defined in "
            "advertised.listeners. The valid options based on currently configured listeners "
            "are PLAINTEXT",
        ),
        (
            {"security.inter.broker.protocol": "SSL"},
            "inter.broker.listener.name must be a listener name defined in advertised.listeners",
        ),
        (
            {"inter.broker.listener.name": "PLAINTEXT", "security.inter.broker.protocol": "SSL"},
            "Only one of inter.broker.listener.name and security.inter.broker.protocol should "
            "be set.",
        ),
        (
            {"listeners": "PLAINTEXT://:0,SSL://:0", "advertised.listeners": "SASL_SSL://h:1"},
            "inter.broker.listener.name must be a listener name",
        ),
        (
            {
                "listeners": "PLAINTEXT://:0",
                "advertised.listeners": "PLAINTEXT://h:1,SSL://h:2",
            },
            "advertised.listeners listener names must be equal to or a subset of the ones "
            "defined in listeners. Found PLAINTEXT,SSL. The valid options based on the current "
            "configuration are PLAINTEXT",
        ),
        (
            {"advertised.listeners": "PLAINTEXT://0.0.0.0:9092"},
            "advertised.listeners cannot use the nonroutable meta-address 0.0.0.0. Use a "
            "routable IP address.",
        ),
        (
            {"listeners": "PLAINTEXT://:70000"},
            "port 70000 of PLAINTEXT://:70000 is not 0..65535",
        ),
        (
            {"listeners": "CONTROLLER://:0", "controller.listener.names": "CONTROLLER"},
            "There must be at least one broker advertised listener. Perhaps all listeners "
            "appear in controller.listener.names?",
        ),
        (
            {
                "listeners": "PLAINTEXT://:0,SSL://:0",
                "controller.listener.names": "CONTROLLER",
            },
            "Controller listener with name CONTROLLER defined in controller.listener.names not "
            "found in listener.security.protocol.map",
        ),
    ],
)
def test_bad_listener_configurations_are_refused_with_kafkas_message(props, message):
    with pytest.raises(ConfigError) as e:
        ListenerConfig.from_properties(props)
    assert message in str(e.value)


def test_port_zero_repeats_and_an_ipv4_ipv6_pair_may_share_a_port():
    parse_listener_list(
        "PLAINTEXT://:0,SSL://:0", parse_protocol_map("PLAINTEXT:PLAINTEXT,SSL:SSL")
    )
    both = parse_listener_list(
        "PLAINTEXT://127.0.0.1:9092,SSL://[::1]:9092",
        parse_protocol_map("PLAINTEXT:PLAINTEXT,SSL:SSL"),
    )
    assert [e.port for e in both] == [9092, 9092]


def test_advertised_listeners_may_repeat_ports_and_default_to_listeners():
    c = ListenerConfig.from_properties(
        {
            "listeners": "HOST://:9091,LB://:9092",
            "advertised.listeners": "HOST://h:9091,LB://h:9091",
            "listener.security.protocol.map": "HOST:SASL_SSL,LB:SASL_SSL",
            "inter.broker.listener.name": "HOST",
        }
    )
    assert [str(e) for e in c.advertised] == ["HOST://h:9091", "LB://h:9091"]
    assert c.advertised_for("lb") == ListenerEndpoint("LB", P.SASL_SSL, "h", 9091)


def test_controller_listeners_are_not_broker_listeners_and_default_to_plaintext():
    c = ListenerConfig.from_properties(
        {
            "listeners": "PLAINTEXT://:0,CONTROLLER://127.0.0.1:0",
            "controller.listener.names": "controller",
        }
    )
    assert [e.listener_name for e in c.broker_listeners] == ["PLAINTEXT"]
    assert [e.listener_name for e in c.advertised] == ["PLAINTEXT"]
    assert c.protocol_map["CONTROLLER"] is P.PLAINTEXT  # Kafka's KRaft default mapping
    assert c.controller_listener("10.0.0.9", 0) == ListenerEndpoint(
        "CONTROLLER", P.PLAINTEXT, "127.0.0.1", 0
    )
    # a restart binds the launcher's port again; a listed port and host are kept otherwise
    assert c.controller_listener("10.0.0.9", 5555).port == 5555
    fixed = ListenerConfig.from_properties(
        {
            "listeners": "PLAINTEXT://:0,CONTROLLER://:9093",
            "controller.listener.names": "CONTROLLER",
        }
    )
    assert fixed.controller_listener("10.0.0.9", 0) == ListenerEndpoint(
        "CONTROLLER", P.PLAINTEXT, "10.0.0.9", 9093
    )


def test_the_driver_servers_take_the_inter_broker_listener_without_controller_names():
    c = ListenerConfig.from_properties(
        {
            "listeners": "CLIENT://:0,INTERNAL://:0",
            "listener.security.protocol.map": "CLIENT:SSL,INTERNAL:SASL_PLAINTEXT",
            "inter.broker.listener.name": "INTERNAL",
        }
    )
    expected = ListenerEndpoint("INTERNAL", P.SASL_PLAINTEXT, "10.0.0.1", 7)
    assert c.controller_listener("10.0.0.1", 7) == expected
    assert c.coordinator_listener("10.0.0.1", 7) == expected


def test_a_listener_setting_overrides_the_server_wide_one_for_that_listener_only():
    props = {
        "ssl.keystore.location": "/etc/base.p12",
        "ssl.client.auth": "none",
        "listener.name.internal.ssl.client.auth": "required",
        "listener.name.internal.scram-sha-512.sasl.jaas.config": "secret-jaas",
        "listener.name.external.ssl.keystore.location": "/etc/external.p12",
    }
    internal = ListenerSettings("INTERNAL", props)
    assert internal.get("ssl.client.auth") == "required"
    assert internal.get("ssl.keystore.location") == "/etc/base.p12"
    assert internal.is_overridden("ssl.client.auth")
    assert not internal.is_overridden("ssl.keystore.location")
    assert internal.get("ssl.truststore.location", "dflt") == "dflt"
    assert internal.for_mechanism("SCRAM-SHA-512", "sasl.jaas.config") == "secret-jaas"
    assert internal.for_mechanism("PLAIN", "sasl.jaas.config") is None
    assert internal.values() == {
        "ssl.keystore.location": "/etc/base.p12",
        "ssl.client.auth": "required",
        "scram-sha-512.sasl.jaas.config": "secret-jaas",
    }
    assert ListenerSettings("EXTERNAL", props).get("ssl.keystore.location") == "/etc/external.p12"
    # values may be secrets: reprs name the listener only
    assert "secret" not in repr(internal)
    c = ListenerConfig.from_properties(props | {"listeners": "PLAINTEXT://:0"})
    assert "secret" not in repr(c) and "secret" not in repr(c.security(c.listeners[0]))


def test_a_plaintext_listener_has_no_tls_and_no_sasl():
    c = ListenerConfig.from_properties({})
    security = c.security(c.listeners[0])
    assert (security.listener_name, security.security_protocol) == ("PLAINTEXT", P.PLAINTEXT)
    assert (security.ssl_context, security.sasl, security.uses_tls, security.uses_sasl) == (
        None,
        None,
        False,
        False,
    )
    assert plaintext().endpoint == ListenerEndpoint("PLAINTEXT", P.PLAINTEXT, "", 0)


@pytest.mark.parametrize("protocol", [P.SSL, P.SASL_PLAINTEXT, P.SASL_SSL])
def test_a_secured_listener_that_cannot_be_served_refuses_to_start_naming_the_fix(protocol):
    endpoint = ListenerEndpoint("EXTERNAL", protocol, "", 0)
    try:
        security = listener_security(endpoint, ListenerSettings("EXTERNAL", {}))
    except ConfigError as e:
        if protocol is P.SASL_PLAINTEXT:  # SASL is served: Kafka's default GSSAPI is not
            assert "listener EXTERNAL: sasl.enabled.mechanisms=GSSAPI" in str(e)
        else:
            assert "listener EXTERNAL uses" in str(e)
            # TLS without a key store names the setting; a part not served yet names the map
            assert "ssl.keystore.location" in str(e) or "listener.security.protocol.map" in str(e)
    else:  # the part exists (tls/sasl landed): it must be filled in
        assert (security.ssl_context is not None) == (protocol is not P.SASL_PLAINTEXT)
        assert (security.sasl is not None) == (protocol is not P.SSL)


def test_the_listener_settings_are_declared_with_kafkas_names_and_defaults():
    for name, default in [
        ("listeners", "PLAINTEXT://127.0.0.1:0"),
        ("advertised.listeners", None),
        (
            "listener.security.protocol.map",
            "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
        ),
        ("inter.broker.listener.name", None),
        ("security.inter.broker.protocol", "PLAINTEXT"),
        ("controller.listener.names", None),
    ]:
        setting = REGISTRY.find(name)
        assert setting is not None and setting.group == "listeners", name
        assert setting.default == default, name
    # a per-listener setting is a known name, not reported as unknown
    assert REGISTRY.find("listener.name.internal.ssl.keystore.location") is not None


def test_a_broker_parses_its_listeners_at_start():
    from sparklog.broker.config import BrokerConfig

    c = BrokerConfig.from_properties(
        {
            "listeners": "CLIENT://:0,REPLICATION://:0",
            "listener.security.protocol.map": "CLIENT:PLAINTEXT,REPLICATION:PLAINTEXT",
            "inter.broker.listener.name": "REPLICATION",
            "listener.name.client.max.connections": "10",
        }
    )
    assert [e.listener_name for e in c.listener_config.broker_listeners] == [
        "CLIENT",
        "REPLICATION",
    ]
    assert c.unknown == ()
    with pytest.raises(ConfigError, match="No security protocol defined for listener CLIENT"):
        BrokerConfig.from_properties({"listeners": "CLIENT://:0"})


def test_a_tls_listener_gets_its_context_principal_rules_and_handshake_bound(tls_ca):
    import ssl

    props = {
        **tls_ca.server_props(),
        "listener.name.external.ssl.client.auth": "required",
        "listener.name.external.ssl.principal.mapping.rules": "RULE:^CN=([^,]+),.*$/$1/L",
        "listener.name.external.sparklog.ssl.handshake.timeout.ms": "3000",
    }
    external = ListenerEndpoint("EXTERNAL", P.SSL, "", 0)
    security = listener_security(external, ListenerSettings("EXTERNAL", props))
    assert security.ssl_context is not None
    assert security.ssl_context.verify_mode == ssl.CERT_REQUIRED
    assert security.principal_builder.mapper.name("CN=Alice,O=x") == "alice"
    assert security.ssl_handshake_timeout_ms == 3000
    internal = ListenerEndpoint("INTERNAL", P.SSL, "", 0)
    other = listener_security(internal, ListenerSettings("INTERNAL", props))
    assert other.ssl_context is not None and other.ssl_context.verify_mode == ssl.CERT_NONE
    assert other.principal_builder.mapper.name("CN=Alice,O=x") == "CN=Alice,O=x"  # DEFAULT
    assert other.ssl_handshake_timeout_ms == 10_000
    with pytest.raises(ConfigError, match="listener EXTERNAL uses SSL: .*ssl.key.password"):
        bad = {**props, "listener.name.external.ssl.key.password": "wrong"}
        listener_security(external, ListenerSettings("EXTERNAL", bad))


def test_a_servers_own_connections_to_a_tls_listener_use_its_settings_as_client(tls_ca):
    """Inter-broker mTLS: the listener's key store is the client certificate, its trust store
    checks the peer; the peer sees the broker certificate's subject."""
    import ssl

    from sparklog.security.listeners import client_ssl_context

    props = {**tls_ca.server_props(), "listener.name.replication.ssl.client.auth": "required"}
    endpoint = ListenerEndpoint("REPLICATION", P.SSL, "", 0)
    settings = ListenerSettings("REPLICATION", props)
    server = listener_security(endpoint, settings).ssl_context
    client = client_ssl_context(settings)
    assert client.check_hostname and client.verify_mode == ssl.CERT_REQUIRED
    s_in, s_out, c_in, c_out = (ssl.MemoryBIO() for _ in range(4))
    srv = server.wrap_bio(s_in, s_out, server_side=True)
    cli = client.wrap_bio(c_in, c_out, server_hostname="127.0.0.1")
    done: set[str] = set()
    for _ in range(10):
        for name, obj in (("c", cli), ("s", srv)):
            if name not in done:
                try:
                    obj.do_handshake()
                    done.add(name)
                except ssl.SSLWantReadError:
                    pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
    assert done == {"c", "s"}
    subject = dict(rdn[0] for rdn in srv.getpeercert()["subject"])
    assert subject["commonName"] == "localhost"  # the broker's own certificate


def test_a_registration_keeps_every_endpoint_through_a_snapshot():
    from sparklog.metadata.image import MetadataImage

    endpoints = (
        ListenerEndpoint("CLIENT", P.SASL_SSL, "b1.example", 9092),
        ListenerEndpoint("REPLICATION", P.SSL, "10.0.0.1", 9093),
    )
    image = MetadataImage()
    image.apply(
        {
            "type": "RegisterBroker",
            "broker_id": 1,
            "broker_epoch": 0,
            "incarnation_id": "i",
            "host": "b1.example",
            "port": 9092,
            "endpoints": [
                {
                    "name": e.listener_name,
                    "host": e.host,
                    "port": e.port,
                    "security_protocol": int(e.security_protocol),
                }
                for e in endpoints
            ],
        }
    )
    # a registration from before endpoints were recorded is one PLAINTEXT listener
    image.apply(
        {
            "type": "RegisterBroker",
            "broker_id": 2,
            "broker_epoch": 1,
            "incarnation_id": "j",
            "host": "h",
            "port": 1,
        }
    )
    restored = MetadataImage.from_dict(json.loads(json.dumps(image.to_dict())))
    for view in (image, restored):
        b1, b2 = view.broker(1), view.broker(2)
        assert b1.endpoints == endpoints
        assert b1.endpoint("replication") == endpoints[1]
        assert b1.endpoint("PLAINTEXT") is None
        assert b2.endpoint("PLAINTEXT") == ListenerEndpoint("PLAINTEXT", P.PLAINTEXT, "h", 1)
        assert b2.endpoint("CLIENT") is None


def test_the_launchers_bind_host_fills_listeners_that_name_none():
    from sparklog.broker.config import BrokerConfig

    def listeners(props):
        c = BrokerConfig.from_properties(props | {"listeners.host": "10.1.2.3"})
        return [str(e) for e in c.listener_config.broker_listeners]

    assert listeners({}) == ["PLAINTEXT://10.1.2.3:0"]
    assert listeners(
        {
            "listeners": "CLIENT://:0,REPLICATION://127.0.0.1:0",
            "listener.security.protocol.map": "CLIENT:PLAINTEXT,REPLICATION:PLAINTEXT",
            "inter.broker.listener.name": "REPLICATION",
        }
    ) == ["CLIENT://10.1.2.3:0", "REPLICATION://127.0.0.1:0"]
    c = BrokerConfig.from_properties({"listeners.host": "::1"})
    assert c.listener_host_port == ("::1", 0)


def test_the_shipped_defaults_file_takes_any_listener_layout():
    """conf/sparklog-defaults.conf sets neither listener.security.protocol.map (an explicit map
    needs a controller mapping) nor security.inter.broker.protocol (Kafka refuses it with
    inter.broker.listener.name), so `serve --config ...` can name listeners freely."""
    from pathlib import Path

    from sparklog.metadata.configs import read_properties

    conf = Path(__file__).parents[3] / "conf" / "sparklog-defaults.conf"
    defaults = read_properties(conf)
    ListenerConfig.from_properties(
        defaults
        | {
            "listeners": "CLIENT://:0,REPLICATION://:0,CONTROLLER://:0",
            "listener.security.protocol.map": "CLIENT:PLAINTEXT,REPLICATION:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "REPLICATION",
            "controller.listener.names": "CONTROLLER",
        }
    )


def test_a_broker_describes_its_listener_settings():
    from sparklog.broker.config import BrokerConfig

    c = BrokerConfig.from_properties(
        {
            "listeners": "CLIENT://:0,REPLICATION://:0",
            "listener.security.protocol.map": "CLIENT:PLAINTEXT,REPLICATION:PLAINTEXT",
            "inter.broker.listener.name": "REPLICATION",
        }
    )
    described = c.described_settings()
    assert described["inter.broker.listener.name"] == ("REPLICATION", True)
    assert described["listener.security.protocol.map"] == (
        "CLIENT:PLAINTEXT,REPLICATION:PLAINTEXT",
        True,
    )
    assert described["security.inter.broker.protocol"] == ("PLAINTEXT", False)
    assert described["listeners"] == ("CLIENT://:0,REPLICATION://:0", True)


def test_the_listener_port_file_keeps_a_port_per_listener_and_reads_the_old_one(tmp_path):
    from sparklog.broker.meta_properties import read_listener_ports, write_listener_ports

    assert read_listener_ports(tmp_path) == {}
    write_listener_ports(tmp_path, {"CLIENT": 9092, "REPLICATION": 9093})
    assert read_listener_ports(tmp_path) == {"CLIENT": 9092, "REPLICATION": 9093}
    (tmp_path / ".listener-port").write_text("40123\n")  # one listener's broker wrote this
    assert read_listener_ports(tmp_path) == {"": 40123}
