"""TLS contexts from Kafka's `ssl.*` settings (Kafka's `DefaultSslEngineFactory`).

Theory of operation. `SslConfig.of(props)` reads the `ssl.*` names of a listener's (or a
client's) settings once, at start, and refuses what Kafka refuses with a `ConfigError` naming
the setting and the fix; `server_context(config)` and `client_context(config)` then build the
standard library's `ssl.SSLContext` a listener or a connection uses.

* Key material (`ssl.keystore.*`): a PEM file (`ssl.keystore.type=PEM`: a PKCS#8 key,
  encrypted with `ssl.key.password` or not, and the certificate chain), the same inline
  (`ssl.keystore.key` + `ssl.keystore.certificate.chain`), or a PKCS12 keystore
  (`ssl.keystore.type=PKCS12`, read with `cryptography`). Kafka's default type JKS reads a
  PKCS12 file too, as the JDK's own JKS keystore does (`keystore.type.compat`); a real JKS
  file is refused with the `keytool -importkeystore` line that converts it.
* Trust (`ssl.truststore.*`): PEM (a file or inline `ssl.truststore.certificates`) or PKCS12;
  without one, the system's CAs, as Java falls back to its `cacerts`.
* `ssl.client.auth` none/requested/required (servers), `ssl.endpoint.identification.algorithm`
  `https` (clients check the server's name, Kafka's default since 2.0) or empty,
  `ssl.enabled.protocols` and `ssl.protocol` (the versions allowed: OpenSSL takes a range, so
  the range from the lowest to the highest enabled one, capped by `ssl.protocol`), and
  `ssl.cipher.suites` (IANA names, as Java takes them, or OpenSSL names; TLS 1.3's suites
  cannot be narrowed through Python's `ssl` and are accepted as they are).

Python's `load_cert_chain` reads files only, so key material from PKCS12 or inline PEM goes
through a temporary file holding the key encrypted under a one-time random password: an
unencrypted key never touches the disk. Secrets (passwords, inline keys) are kept out of
reprs and messages.
"""

from __future__ import annotations

import enum
import logging
import re
import secrets
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Final

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
from cryptography.hazmat.primitives.serialization import pkcs12

from sparklog.settings import (
    Check,
    ConfigError,
    ConfigType,
    OneOf,
    Range,
    Scope,
    Setting,
    Table,
    define,
)

logger = logging.getLogger(__name__)


class SslClientAuth(enum.StrEnum):
    """Kafka's `ssl.client.auth` (`SslClientAuth`)."""

    NONE = "none"
    REQUESTED = "requested"
    REQUIRED = "required"


KEYSTORE_TYPES: Final = ("JKS", "PKCS12", "PEM")
_VERSIONS: Final = {
    "TLSv1": ssl.TLSVersion.TLSv1,
    "TLSv1.1": ssl.TLSVersion.TLSv1_1,
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}
#: `ssl.protocol` values (Java's SSLContext algorithm names) and the highest version each allows
_PROTOCOL_CAPS: Final = {
    "TLS": ssl.TLSVersion.MAXIMUM_SUPPORTED,
    "TLSV1": ssl.TLSVersion.TLSv1,
    "TLSV1.1": ssl.TLSVersion.TLSv1_1,
    "TLSV1.2": ssl.TLSVersion.TLSv1_2,
    "TLSV1.3": ssl.TLSVersion.TLSv1_3,
}
_JKS_MAGIC: Final = b"\xfe\xed\xfe\xed"
_KEY_BLOCK = re.compile(
    rb"-----BEGIN ((?:ENCRYPTED |RSA |EC )?PRIVATE KEY)-----.+?-----END \1-----", re.DOTALL
)


def _settings(scope: Scope) -> tuple[Setting, ...]:
    """The `ssl.*` settings servers and clients share (Kafka's `SslConfigs`)."""

    def s(name: str, kind: ConfigType, default: Any, doc: str, **extra: Any) -> Setting:
        sensitive = kind == ConfigType.PASSWORD
        return Setting(
            name, kind, default, doc=doc, scope=scope, group="ssl", sensitive=sensitive, **extra
        )

    store_type = OneOf(KEYSTORE_TYPES)
    return (
        s("ssl.protocol", ConfigType.STRING, "TLSv1.3", "the TLS version family (TLS, TLSv1.2, "
          "TLSv1.3): caps ssl.enabled.protocols", validator=Check(
              lambda v: v.upper() in _PROTOCOL_CAPS, "one of TLS, TLSv1.2, TLSv1.3")),
        s("ssl.enabled.protocols", ConfigType.LIST, ("TLSv1.2", "TLSv1.3"),
          "TLS versions allowed", validator=Check(
              lambda v: all(p in _VERSIONS for p in v), "a list of TLSv1.2, TLSv1.3")),
        s("ssl.cipher.suites", ConfigType.LIST, None, "cipher suites allowed for TLS 1.2 and "
          "older (IANA or OpenSSL names); empty: OpenSSL's defaults"),
        s("ssl.keystore.type", ConfigType.STRING, "JKS", "PEM, PKCS12 (JKS reads PKCS12)",
          validator=store_type, parser=_upper),
        s("ssl.keystore.location", ConfigType.STRING, None, "the key store file"),
        s("ssl.keystore.password", ConfigType.PASSWORD, None, "the PKCS12 key store's password"),
        s("ssl.key.password", ConfigType.PASSWORD, None, "the private key's password"),
        s("ssl.keystore.key", ConfigType.PASSWORD, None, "the private key, PEM (type PEM)"),
        s("ssl.keystore.certificate.chain", ConfigType.PASSWORD, None,
          "the certificate chain, PEM (type PEM)"),
        s("ssl.truststore.type", ConfigType.STRING, "JKS", "PEM, PKCS12 (JKS reads PKCS12)",
          validator=store_type, parser=_upper),
        s("ssl.truststore.location", ConfigType.STRING, None, "the trust store file"),
        s("ssl.truststore.password", ConfigType.PASSWORD, None, "the trust store's password"),
        s("ssl.truststore.certificates", ConfigType.PASSWORD, None,
          "trusted certificates, PEM (type PEM)"),
        s("ssl.endpoint.identification.algorithm", ConfigType.STRING, "https",
          "https: check the server's host name against its certificate; empty: do not",
          validator=Check(lambda v: v in ("", "https"), "https or empty")),
        *(
            (
                s("ssl.client.auth", ConfigType.STRING, "none",
                  "none, requested or required: ask TLS clients for a certificate",
                  validator=OneOf(tuple(SslClientAuth), lower=True)),
                # sparklog's own: Kafka bounds a stalled handshake only by
                # connections.max.idle.ms (10 minutes)
                s("sparklog.ssl.handshake.timeout.ms", ConfigType.INT, 10_000,
                  "a TLS handshake not finished within this long closes its connection",
                  validator=Range(1, 2**31 - 1), attribute="handshake_timeout_ms"),
            )
            if scope is Scope.BROKER
            else ()
        ),
    )  # fmt: skip


def _upper(raw: object) -> str | None:
    return None if raw is None else str(raw).strip().upper()


#: A server listener's `ssl.*` settings (broker, controller and coordinator listeners alike).
SERVER_SSL_SETTINGS: Final[Table] = define(*_settings(Scope.BROKER))
#: A client's `ssl.*` settings (sparklog's client tables include these).
CLIENT_SSL_SETTINGS: Final[Table] = define(*_settings(Scope.CLIENT))


@dataclass(frozen=True, slots=True)
class SslConfig:
    """One listener's or client's parsed `ssl.*` settings; secrets are kept out of repr."""

    ssl_protocol: str = SERVER_SSL_SETTINGS.default("ssl.protocol")
    ssl_enabled_protocols: tuple[str, ...] = SERVER_SSL_SETTINGS.default("ssl.enabled.protocols")
    ssl_cipher_suites: tuple[str, ...] = ()
    ssl_keystore_type: str = "JKS"
    ssl_keystore_location: str | None = None
    ssl_keystore_password: str | None = field(default=None, repr=False)
    ssl_key_password: str | None = field(default=None, repr=False)
    ssl_keystore_key: str | None = field(default=None, repr=False)
    ssl_keystore_certificate_chain: str | None = field(default=None, repr=False)
    ssl_truststore_type: str = "JKS"
    ssl_truststore_location: str | None = None
    ssl_truststore_password: str | None = field(default=None, repr=False)
    ssl_truststore_certificates: str | None = field(default=None, repr=False)
    ssl_endpoint_identification_algorithm: str = "https"
    ssl_client_auth: SslClientAuth = SslClientAuth.NONE
    #: servers: `sparklog.ssl.handshake.timeout.ms` (KafkaServer's ssl_handshake_timeout_ms)
    handshake_timeout_ms: int = 10_000

    @classmethod
    def of(cls, props: Mapping[str, object], *, server: bool = True) -> SslConfig:
        """The `ssl.*` names of `props` (others are ignored: other components read them)."""
        table = SERVER_SSL_SETTINGS if server else CLIENT_SSL_SETTINGS
        # None (a filled-in config's unset setting) keeps the field's default
        given = {name: raw for name, raw in props.items() if raw is not None}
        values = table.parse(given, unknown="ignore")
        if "ssl_client_auth" in values:
            values["ssl_client_auth"] = SslClientAuth(values["ssl_client_auth"])
        config = cls(**values)
        config._check()
        return config

    @property
    def has_keystore(self) -> bool:
        return bool(self.ssl_keystore_location or self.ssl_keystore_key)

    def _check(self) -> None:
        """Kafka's `DefaultSslEngineFactory` refusals, before any file is read."""
        if self.ssl_keystore_key or self.ssl_keystore_certificate_chain:
            if self.ssl_keystore_type != "PEM":
                _refuse("ssl.keystore.key and ssl.keystore.certificate.chain need "
                        f"ssl.keystore.type=PEM, not {self.ssl_keystore_type}")  # fmt: skip
            if not (self.ssl_keystore_key and self.ssl_keystore_certificate_chain):
                _refuse("ssl.keystore.key and ssl.keystore.certificate.chain go together: "
                        "set both")  # fmt: skip
            if self.ssl_keystore_location:
                _refuse("set ssl.keystore.location or the inline ssl.keystore.key, not both")
        if self.ssl_keystore_type == "PEM" and self.ssl_keystore_password is not None:
            _refuse("ssl.keystore.password cannot be set for a PEM key store; "
                    "the key's password is ssl.key.password")  # fmt: skip
        if self.ssl_truststore_certificates:
            if self.ssl_truststore_type != "PEM":
                _refuse("ssl.truststore.certificates needs ssl.truststore.type=PEM, "
                        f"not {self.ssl_truststore_type}")  # fmt: skip
            if self.ssl_truststore_location:
                _refuse("set ssl.truststore.location or ssl.truststore.certificates, not both")
        if self.ssl_truststore_type == "PEM" and self.ssl_truststore_password is not None:
            _refuse("ssl.truststore.password cannot be set for a PEM trust store; remove it")
        if not self.ssl_enabled_protocols:
            _refuse("ssl.enabled.protocols is empty: name at least one of TLSv1.2, TLSv1.3")


def _refuse(message: str) -> None:
    raise ConfigError(message)


# -- contexts --------------------------------------------------------------------------------


def server_context(config: SslConfig) -> ssl.SSLContext:
    """A listener's TLS context: its key store is required (Kafka refuses an SSL listener
    without one), client certificates are asked for per `ssl.client.auth`."""
    if not config.has_keystore:
        _refuse("an SSL listener needs a key store: set ssl.keystore.location "
                "(or ssl.keystore.key and ssl.keystore.certificate.chain)")  # fmt: skip
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _configure(ctx, config)
    ctx.verify_mode = {
        SslClientAuth.NONE: ssl.CERT_NONE,
        SslClientAuth.REQUESTED: ssl.CERT_OPTIONAL,
        SslClientAuth.REQUIRED: ssl.CERT_REQUIRED,
    }[config.ssl_client_auth]
    return ctx


def client_context(config: SslConfig) -> ssl.SSLContext:
    """A connection's TLS context: the server's chain is always verified, its host name when
    `ssl.endpoint.identification.algorithm=https`; a key store, when set, answers mTLS."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = config.ssl_endpoint_identification_algorithm == "https"
    ctx.verify_mode = ssl.CERT_REQUIRED
    _configure(ctx, config)
    return ctx


def _configure(ctx: ssl.SSLContext, config: SslConfig) -> None:
    ctx.minimum_version, ctx.maximum_version = _version_range(config)
    if config.ssl_cipher_suites:
        ctx.set_ciphers(_openssl_ciphers(config.ssl_cipher_suites))
    if config.has_keystore:
        key, chain = load_keystore(config)
        _load_key_material(ctx, key, chain)
    trusted = load_truststore(config)
    if trusted is None:
        ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
    else:
        pem = b"".join(c.public_bytes(serialization.Encoding.PEM) for c in trusted)
        ctx.load_verify_locations(cadata=pem.decode("ascii"))


def _version_range(config: SslConfig) -> tuple[ssl.TLSVersion, ssl.TLSVersion]:
    enabled = sorted(_VERSIONS[p] for p in config.ssl_enabled_protocols)
    cap = _PROTOCOL_CAPS[config.ssl_protocol.upper()]
    if cap is not ssl.TLSVersion.MAXIMUM_SUPPORTED and enabled[0] > cap:
        _refuse(f"ssl.protocol={config.ssl_protocol} allows none of ssl.enabled.protocols="
                f"{','.join(config.ssl_enabled_protocols)}")  # fmt: skip
    high = enabled[-1] if cap is ssl.TLSVersion.MAXIMUM_SUPPORTED else min(enabled[-1], cap)
    return enabled[0], high


def _openssl_ciphers(suites: tuple[str, ...]) -> str:
    """OpenSSL's cipher string for `ssl.cipher.suites` (Java takes IANA names; OpenSSL names
    pass through). TLS 1.3 suites are skipped (OpenSSL's TLS 1.3 list is not settable here)."""
    names: list[str] = []
    unknown: list[str] = []
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    for suite in suites:
        if suite.startswith(("TLS_AES_", "TLS_CHACHA20_")):
            continue
        name = _iana_to_openssl(suite) if suite.startswith("TLS_") else suite
        try:
            probe.set_ciphers(name)
        except ssl.SSLError:
            unknown.append(suite)
            continue
        names.append(name)
    if unknown:
        _refuse(f"ssl.cipher.suites names suites this OpenSSL does not offer: "
                f"{', '.join(unknown)}")  # fmt: skip
    # only TLS 1.3 suites named: TLS 1.2 and older get none, so only TLS 1.3 can be spoken
    return ":".join(names) if names else "!ALL"


def _iana_to_openssl(suite: str) -> str:
    """`TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256` -> `ECDHE-RSA-AES128-GCM-SHA256`."""
    exchange, _, cipher = suite.removeprefix("TLS_").partition("_WITH_")
    kx = "" if exchange == "RSA" else exchange.replace("_", "-") + "-"
    cipher = re.sub(r"^AES_(\d+)_", r"AES\1-", cipher)
    cipher = cipher.replace("CBC_SHA", "SHA").replace(
        "CHACHA20_POLY1305_SHA256", "CHACHA20-POLY1305"
    )
    return kx + cipher.replace("_", "-")


# -- key and trust stores --------------------------------------------------------------------


def load_keystore(config: SslConfig) -> tuple[PrivateKeyTypes, list[x509.Certificate]]:
    """The private key and certificate chain (leaf first) of the configured key store."""
    if config.ssl_keystore_key:
        assert config.ssl_keystore_certificate_chain  # SslConfig._check
        where = "ssl.keystore.key"
        data = config.ssl_keystore_key.encode() + b"\n"
        data += config.ssl_keystore_certificate_chain.encode()
    else:
        assert config.ssl_keystore_location
        where = f"ssl.keystore.location={config.ssl_keystore_location}"
        data = _read(config.ssl_keystore_location, "ssl.keystore.location")
    if config.ssl_keystore_type == "PEM":
        key, chain = _pem_keystore(data, config.ssl_key_password, where)
    else:
        passwords = [config.ssl_keystore_password, config.ssl_key_password]
        key, chain = _pkcs12_keystore(data, passwords, where, config.ssl_keystore_type)
    if key.public_key().public_bytes(*_SPKI) != chain[0].public_key().public_bytes(*_SPKI):
        _refuse(f"{where}: the private key does not belong to the first certificate")
    return key, chain


def load_truststore(config: SslConfig) -> list[x509.Certificate] | None:
    """The trusted certificates, or None when no trust store is set (the system's CAs)."""
    if config.ssl_truststore_certificates:
        where = "ssl.truststore.certificates"
        data = config.ssl_truststore_certificates.encode()
    elif config.ssl_truststore_location:
        where = f"ssl.truststore.location={config.ssl_truststore_location}"
        data = _read(config.ssl_truststore_location, "ssl.truststore.location")
    else:
        return None
    if config.ssl_truststore_type == "PEM":
        certs = _pem_certificates(data, where)
    else:
        store = _load_pkcs12(data, [config.ssl_truststore_password], where,
                             config.ssl_truststore_type)  # fmt: skip
        certs = [c.certificate for c in store.additional_certs]
        if store.cert is not None:
            certs.insert(0, store.cert.certificate)
    if not certs:
        _refuse(f"{where} holds no certificate")
    return certs


_SPKI: Final = (
    serialization.Encoding.DER,
    serialization.PublicFormat.SubjectPublicKeyInfo,
)


def _read(location: str, setting: str) -> bytes:
    try:
        return Path(location).read_bytes()
    except OSError as e:
        raise ConfigError(f"{setting}={location} cannot be read: {e.strerror}") from None


def _pem_certificates(data: bytes, where: str) -> list[x509.Certificate]:
    if b"-----BEGIN CERTIFICATE-----" not in data:
        _refuse(f"{where} holds no PEM certificate (-----BEGIN CERTIFICATE-----)")
    try:
        return x509.load_pem_x509_certificates(data)
    except ValueError:
        raise ConfigError(f"{where}: a PEM certificate does not parse") from None


def _pem_keystore(
    data: bytes, password: str | None, where: str
) -> tuple[PrivateKeyTypes, list[x509.Certificate]]:
    found = _KEY_BLOCK.search(data)
    if found is None:
        _refuse(f"{where} holds no PEM private key (-----BEGIN PRIVATE KEY----- or "
                "-----BEGIN ENCRYPTED PRIVATE KEY-----)")  # fmt: skip
    assert found is not None
    encrypted = found.group(1) == b"ENCRYPTED PRIVATE KEY"
    if encrypted and password is None:
        _refuse(f"{where}: the private key is encrypted; set ssl.key.password")
    try:
        key = serialization.load_pem_private_key(
            found.group(0), password.encode() if encrypted and password is not None else None
        )
    except (ValueError, TypeError):
        raise ConfigError(
            f"{where}: the private key does not load"
            + ("; check ssl.key.password" if encrypted else "")
        ) from None
    return key, _pem_certificates(data, where)


def _load_pkcs12(
    data: bytes, passwords: list[str | None], where: str, kind: str
) -> pkcs12.PKCS12KeyAndCertificates:
    if data.startswith(_JKS_MAGIC):
        _refuse(f"{where} is a JKS key store, which sparklog cannot read; convert it with "
                "keytool -importkeystore -srckeystore <it> -destkeystore <it>.p12 "
                "-deststoretype PKCS12, and set type PKCS12")  # fmt: skip
    tried: list[str | None] = [p for p in passwords if p is not None] or [None]
    for password in tried:
        try:
            return pkcs12.load_pkcs12(data, password.encode() if password else None)
        except ValueError:
            continue
    hint = "its password is wrong" if tried != [None] else "it needs a password"
    raise ConfigError(f"{where} ({kind}) does not load: {hint} or it is not PKCS12")


def _pkcs12_keystore(
    data: bytes, passwords: list[str | None], where: str, kind: str
) -> tuple[PrivateKeyTypes, list[x509.Certificate]]:
    store = _load_pkcs12(data, passwords, where, kind)
    if store.key is None or store.cert is None:
        _refuse(f"{where} holds no private key with its certificate")
    assert store.key is not None and store.cert is not None
    return store.key, [store.cert.certificate, *(c.certificate for c in store.additional_certs)]


def _load_key_material(
    ctx: ssl.SSLContext, key: PrivateKeyTypes, chain: list[x509.Certificate]
) -> None:
    """`ctx.load_cert_chain` from memory: through a private temporary file in which the key is
    encrypted under a one-time password (see the module doc)."""
    one_time = secrets.token_urlsafe(24)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(one_time.encode()),
    ) + b"".join(c.public_bytes(serialization.Encoding.PEM) for c in chain)
    with tempfile.NamedTemporaryFile(prefix="sparklog-tls-", suffix=".pem") as f:
        f.write(pem)
        f.flush()
        ctx.load_cert_chain(f.name, password=one_time)


def settings_names(server: bool = True) -> tuple[str, ...]:
    """The `ssl.*` names (listeners route `listener.name.<l>.ssl.*` overrides by these)."""
    return tuple(SERVER_SSL_SETTINGS if server else CLIENT_SSL_SETTINGS)


assert {f.name for f in fields(SslConfig)} >= {s.attr for s in SERVER_SSL_SETTINGS.values()}
