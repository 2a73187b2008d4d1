"""ssl_factory: `ssl.*` settings -> `ssl.SSLContext`s, checked by real TLS handshakes between
the contexts (over memory BIOs: no sockets needed to prove the TLS)."""

from __future__ import annotations

import ssl

import pytest

from sparklog.security.ssl_factory import (
    CLIENT_SSL_SETTINGS,
    SERVER_SSL_SETTINGS,
    SslClientAuth,
    SslConfig,
    client_context,
    server_context,
)
from sparklog.settings import ConfigError, ConfigType
from tests.support.certs import TEST_PASSWORD, TestCA


def handshake(
    server: ssl.SSLContext, client: ssl.SSLContext, server_hostname: str = "localhost"
) -> tuple[ssl.SSLObject, ssl.SSLObject]:
    """Run a TLS handshake between the two contexts; raises the first side's SSLError."""
    s_in, s_out, c_in, c_out = (ssl.MemoryBIO() for _ in range(4))
    srv = server.wrap_bio(s_in, s_out, server_side=True)
    cli = client.wrap_bio(c_in, c_out, server_hostname=server_hostname)
    done = {"s": False, "c": False}
    for _ in range(20):
        for name, obj in (("c", cli), ("s", srv)):
            if not done[name]:
                try:
                    obj.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
        if all(done.values()):
            # TLS 1.3: the server learns of a refused client certificate on the next read
            cli.write(b"x")
            s_in.write(c_out.read())
            assert srv.read(1) == b"x"
            return srv, cli
    raise AssertionError("handshake did not finish")


def server(ca: TestCA, **props: str) -> ssl.SSLContext:
    return server_context(SslConfig.of(ca.server_props() | props))


def client(ca: TestCA, cert=None, **props: str) -> ssl.SSLContext:
    return client_context(SslConfig.of(ca.client_props(cert) | props, server=False))


@pytest.mark.parametrize("keystore", ["PEM", "PKCS12", "INLINE"])
def test_each_keystore_form_serves_tls_a_verifying_client_accepts(tls_ca, keystore):
    srv_ctx = server_context(SslConfig.of(tls_ca.server_props(keystore=keystore)))
    srv, cli = handshake(srv_ctx, client(tls_ca))
    assert cli.version() == "TLSv1.3"
    assert srv.getpeercert() is None  # ssl.client.auth=none asks for no certificate


def test_jks_type_reads_a_pkcs12_file_as_the_jdk_does(tls_ca):
    props = tls_ca.server_props(keystore="PKCS12") | {"ssl.keystore.type": "JKS"}
    handshake(server_context(SslConfig.of(props)), client(tls_ca))


def test_a_real_jks_file_is_refused_with_the_conversion(tls_ca, tmp_path):
    jks = tmp_path / "server.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed\x00\x00\x00\x02" + b"\x00" * 32)
    props = {"ssl.keystore.location": str(jks), "ssl.keystore.password": "x"}
    with pytest.raises(ConfigError, match="keytool -importkeystore"):
        server_context(SslConfig.of(props))


def test_a_java_pkcs12_truststore_is_trusted(tls_ca):
    props = {
        "ssl.truststore.type": "PKCS12",
        "ssl.truststore.location": str(tls_ca.truststore_p12()),
        "ssl.truststore.password": TEST_PASSWORD,
    }
    handshake(server(tls_ca), client_context(SslConfig.of(props, server=False)))


def test_inline_truststore_certificates(tls_ca):
    props = {"ssl.truststore.type": "PEM", "ssl.truststore.certificates": tls_ca.ca_pem.decode()}
    handshake(server(tls_ca), client_context(SslConfig.of(props, server=False)))


def test_a_client_without_the_ca_refuses_the_server(tls_ca, tmp_path):
    other = TestCA(tmp_path / "other")
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(server(tls_ca), client(other))


def test_https_endpoint_identification_checks_the_host_name(tls_ca):
    with pytest.raises(ssl.SSLCertVerificationError, match="mismatch"):
        handshake(server(tls_ca), client(tls_ca), server_hostname="kafka.example.com")
    for host in ("127.0.0.1", "localhost"):
        handshake(server(tls_ca), client(tls_ca), server_hostname=host)
    # empty: the chain is still verified, the name is not (Kafka's opt-out)
    off = client(tls_ca, **{"ssl.endpoint.identification.algorithm": ""})
    handshake(server(tls_ca), off, server_hostname="kafka.example.com")


def test_client_auth_required_refuses_a_client_without_a_certificate(tls_ca):
    with pytest.raises(ssl.SSLError):
        handshake(server(tls_ca, **{"ssl.client.auth": "required"}), client(tls_ca))


@pytest.mark.parametrize("auth", ["requested", "required"])
def test_client_auth_gets_the_clients_certificate(tls_ca, auth):
    alice = tls_ca.client("alice")
    srv, _ = handshake(server(tls_ca, **{"ssl.client.auth": auth}), client(tls_ca, alice))
    subject = dict(rdn[0] for rdn in srv.getpeercert()["subject"])
    assert subject["commonName"] == "alice"


def test_client_auth_requested_lets_a_client_without_a_certificate_in(tls_ca):
    srv, _ = handshake(server(tls_ca, **{"ssl.client.auth": "REQUESTED"}), client(tls_ca))
    assert srv.getpeercert() is None


def test_a_client_certificate_from_another_ca_is_refused(tls_ca, tmp_path):
    stranger = TestCA(tmp_path / "other").client("mallory")
    ctx = client_context(SslConfig.of(tls_ca.client_props() | _keystore(stranger), server=False))
    with pytest.raises(ssl.SSLError):
        handshake(server(tls_ca, **{"ssl.client.auth": "required"}), ctx)


def _keystore(pair) -> dict[str, str]:
    return {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pair.keystore_pem()),
    }


def test_enabled_protocols_and_ssl_protocol_bound_the_version(tls_ca):
    only12 = server(tls_ca, **{"ssl.enabled.protocols": "TLSv1.2"})
    _, cli = handshake(only12, client(tls_ca))
    assert cli.version() == "TLSv1.2"
    capped = server(tls_ca, **{"ssl.protocol": "TLSv1.2"})
    _, cli = handshake(capped, client(tls_ca))
    assert cli.version() == "TLSv1.2"
    with pytest.raises(ssl.SSLError):
        handshake(only12, client(tls_ca, **{"ssl.enabled.protocols": "TLSv1.3"}))


def test_cipher_suites_take_javas_iana_names(tls_ca):
    suite = "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"  # trustme's keys are ECDSA
    srv_ctx = server(tls_ca, **{"ssl.enabled.protocols": "TLSv1.2", "ssl.cipher.suites": suite})
    _, cli = handshake(srv_ctx, client(tls_ca))
    assert cli.cipher()[0] == "ECDHE-ECDSA-AES256-GCM-SHA384"
    with pytest.raises(ConfigError, match="TLS_NOPE_WITH_NOTHING"):
        server(tls_ca, **{"ssl.cipher.suites": "TLS_NOPE_WITH_NOTHING"})


def test_a_wrong_key_password_names_the_setting_not_the_secret(tls_ca):
    props = tls_ca.server_props() | {"ssl.key.password": "not-the-password-xyz"}
    with pytest.raises(ConfigError, match="ssl.key.password") as e:
        server_context(SslConfig.of(props))
    assert "not-the-password-xyz" not in str(e.value)


def test_an_encrypted_key_without_its_password_is_refused(tls_ca):
    props = tls_ca.server_props()
    del props["ssl.key.password"]
    with pytest.raises(ConfigError, match="encrypted; set ssl.key.password"):
        server_context(SslConfig.of(props))


def test_a_wrong_pkcs12_password_is_refused(tls_ca):
    props = tls_ca.server_props(keystore="PKCS12") | {"ssl.keystore.password": "wrong-pw-123"}
    with pytest.raises(ConfigError, match="password is wrong") as e:
        server_context(SslConfig.of(props))
    assert "wrong-pw-123" not in str(e.value)


def test_a_key_that_does_not_match_the_certificate_is_refused(tls_ca):
    props = tls_ca.server_props(keystore="INLINE")
    props["ssl.keystore.key"] = tls_ca.client("bob").key_pem.decode()
    with pytest.raises(ConfigError, match="does not belong"):
        server_context(SslConfig.of(props))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"ssl.keystore.password": "x"}, "cannot be set for a PEM key store"),
        ({"ssl.truststore.password": "x"}, "cannot be set for a PEM trust store"),
        ({"ssl.keystore.location": None, "ssl.keystore.key": "k"}, "go together"),
        ({"ssl.keystore.type": "PKCS12", "ssl.keystore.key": "k"}, "need ssl.keystore.type=PEM"),
        ({"ssl.keystore.type": "JCEKS"}, "one of JKS, PKCS12, PEM"),
        ({"ssl.client.auth": "sometimes"}, "one of none, requested, required"),
        ({"ssl.enabled.protocols": "SSLv3"}, "TLSv1.2, TLSv1.3"),
        ({"ssl.enabled.protocols": ""}, "empty"),
        ({"ssl.protocol": "TLSv1.2", "ssl.enabled.protocols": "TLSv1.3"}, "allows none"),
        ({"ssl.endpoint.identification.algorithm": "ldap"}, "https or empty"),
        ({"ssl.keystore.location": "/nonexistent/ks.pem"}, "cannot be read"),
    ],
)
def test_kafkas_refusals(tls_ca, change, message):
    props = {k: v for k, v in (tls_ca.server_props() | change).items() if v is not None}
    with pytest.raises(ConfigError, match=message):
        server_context(SslConfig.of(props))


def test_a_server_needs_a_keystore(tls_ca):
    with pytest.raises(ConfigError, match="needs a key store"):
        server_context(SslConfig.of(tls_ca.client_props()))


def test_secrets_stay_out_of_repr_and_are_sensitive(tls_ca):
    config = SslConfig.of(tls_ca.server_props(keystore="INLINE") | {"ssl.key.password": "pw9"})
    assert "PRIVATE KEY" not in repr(config) and "pw9" not in repr(config)
    assert config.ssl_client_auth is SslClientAuth.NONE
    for table in (SERVER_SSL_SETTINGS, CLIENT_SSL_SETTINGS):
        secret = {s.name for s in table.values() if s.sensitive}
        assert secret == {s.name for s in table.values() if s.type == ConfigType.PASSWORD}
        assert {"ssl.keystore.password", "ssl.key.password", "ssl.keystore.key"} <= secret
    assert "ssl.client.auth" in SERVER_SSL_SETTINGS and "ssl.client.auth" not in CLIENT_SSL_SETTINGS


def test_the_handshake_bound_is_a_server_setting(tls_ca):
    props = tls_ca.server_props() | {"sparklog.ssl.handshake.timeout.ms": "2500"}
    assert SslConfig.of(props).handshake_timeout_ms == 2500
    assert SslConfig.of(tls_ca.server_props()).handshake_timeout_ms == 10_000
    with pytest.raises(ConfigError, match="sparklog.ssl.handshake.timeout.ms"):
        SslConfig.of({"sparklog.ssl.handshake.timeout.ms": "0"})


def test_a_filled_in_client_config_with_unset_settings_reads_as_the_defaults(tls_ca):
    filled = {s.name: None for s in CLIENT_SSL_SETTINGS.values()} | tls_ca.client_props()
    filled["ssl.keystore.type"] = None
    config = SslConfig.of(filled, server=False)
    assert (config.ssl_keystore_type, config.ssl_enabled_protocols) == (
        "JKS",
        ("TLSv1.2", "TLSv1.3"),
    )
    handshake(server(tls_ca), client_context(config))
