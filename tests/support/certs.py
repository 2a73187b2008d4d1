"""Test certificates: one `trustme` CA per test session, its server and client certificates as
the files Kafka's and librdkafka's settings name (PEM, encrypted PEM keys, PKCS12).

`TestCA` wraps a `trustme.CA`: `server` is a certificate for 127.0.0.1 and localhost (what a
client checks with `ssl.endpoint.identification.algorithm=https`), `client(cn, ...)` a
certificate with a chosen distinguished name for mTLS (the principal Kafka's
`DefaultKafkaPrincipalBuilder` derives from it is `User:` + its RFC 2253 subject, `subject`).
Each `KeyPair` writes its files once, under the session's directory:

* `cert_path` (certificate + chain, PEM), `key_path` (unencrypted PKCS#8 PEM key): librdkafka's
  `ssl.certificate.location` / `ssl.key.location`, Python's `load_cert_chain`;
* `keystore_pem(password)`: Kafka's `ssl.keystore.type=PEM` file (key first, then the chain;
  the key encrypted with `ssl.key.password` when one is given);
* `keystore_p12(password)`: a PKCS12 keystore (`ssl.keystore.type=PKCS12`).

`server_props()` / `client_props()` are the `ssl.*` settings a sparklog or Apache Kafka
server or Java client takes; `librdkafka_props()` those of confluent-kafka and kcat. The
session fixture `tls_ca` (tests/conftest.py) hands out one `TestCA`.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import trustme
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
from cryptography.hazmat.primitives.serialization import pkcs12

#: The hosts every server certificate names (loopback only in tests).
SERVER_HOSTS = ("127.0.0.1", "localhost")
#: Default password of the keystores and keys tests write (tests only).
TEST_PASSWORD = "test-secret"


@dataclass(frozen=True)
class KeyPair:
    """A leaf certificate and its private key, written under `directory` as `name.*`."""

    name: str
    leaf: trustme.LeafCert = field(repr=False)
    directory: Path

    @functools.cached_property
    def certificate(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.leaf.cert_chain_pems[0].bytes())

    @property
    def subject(self) -> str:
        """The subject as Kafka prints it (X500Principal's RFC 2253 form, last RDN first)."""
        return self.certificate.subject.rfc4514_string()

    @property
    def cert_pem(self) -> bytes:
        """The certificate and its chain up to (not including) the root, PEM."""
        return b"".join(blob.bytes() for blob in self.leaf.cert_chain_pems)

    @property
    def key_pem(self) -> bytes:
        """The private key, unencrypted PKCS#8 PEM (what Kafka's PEM keystores take)."""
        return self._key().private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    def encrypted_key_pem(self, password: str) -> bytes:
        """The key as an encrypted PKCS#8 PEM that Java reads too: PBES1 with SHA-1 and
        3DES (JDK 17 cannot read the PBES2 keys `cryptography` writes: "PBES2
        SecretKeyFactory not available"); `cryptography` cannot write PBES1 PKCS#8, so the
        openssl command does."""
        done = subprocess.run(
            ["openssl", "pkcs8", "-topk8", "-v1", "PBE-SHA1-3DES", "-passout", "env:KEY_PASSWORD"],
            input=self.key_pem,
            capture_output=True,
            env={**os.environ, "KEY_PASSWORD": password},
            check=True,
        )
        return done.stdout

    @functools.cached_property
    def cert_path(self) -> Path:
        return self._write(f"{self.name}.crt.pem", self.cert_pem)

    @functools.cached_property
    def key_path(self) -> Path:
        return self._write(f"{self.name}.key.pem", self.key_pem)

    def keystore_pem(self, password: str | None = None) -> Path:
        """Kafka's PEM keystore file: the key (encrypted with `password` when given) then the
        certificate chain, as `ssl.keystore.type=PEM` + `ssl.key.password` read it."""
        key = self.key_pem if password is None else self.encrypted_key_pem(password)
        suffix = "plain" if password is None else "encrypted"
        return self._write(f"{self.name}.keystore.{suffix}.pem", key + self.cert_pem)

    def keystore_p12(self, password: str = TEST_PASSWORD) -> Path:
        """A PKCS12 keystore holding the key and chain, encrypted with `password`."""
        chain = [
            x509.load_pem_x509_certificate(blob.bytes()) for blob in self.leaf.cert_chain_pems[1:]
        ]
        data = pkcs12.serialize_key_and_certificates(
            self.name.encode(),
            self._key(),  # type: ignore[arg-type]  # trustme keys are RSA or EC
            self.certificate,
            chain or None,
            serialization.BestAvailableEncryption(password.encode()),
        )
        return self._write(f"{self.name}.keystore.p12", data)

    def _key(self) -> PrivateKeyTypes:
        return serialization.load_pem_private_key(self.leaf.private_key_pem.bytes(), None)

    def _write(self, filename: str, data: bytes) -> Path:
        path = self.directory / filename
        if not path.exists() or path.read_bytes() != data:
            path.write_bytes(data)
            path.chmod(0o600)
        return path


class TestCA:
    """One certificate authority and the certificates it issued (see the module doc)."""

    __test__ = False  # not a pytest test class

    def __init__(self, directory: Path, *, key_type: trustme.KeyType = trustme.KeyType.ECDSA):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.key_type = key_type
        self.ca = trustme.CA(key_type=key_type, organization_name="sparklog tests")
        self._issued: dict[tuple, KeyPair] = {}

    @functools.cached_property
    def ca_pem(self) -> bytes:
        return self.ca.cert_pem.bytes()

    @functools.cached_property
    def ca_path(self) -> Path:
        """The CA certificate, PEM (`ssl.truststore.location` with type PEM, `ssl.ca.location`)."""
        path = self.directory / "ca.crt.pem"
        path.write_bytes(self.ca_pem)
        return path

    def truststore_p12(self, password: str = TEST_PASSWORD) -> Path:
        """A PKCS12 truststore with the CA as a trusted entry (Java's keytool form)."""
        cert = x509.load_pem_x509_certificate(self.ca_pem)
        data = pkcs12.serialize_java_truststore(
            [pkcs12.PKCS12Certificate(cert, b"ca")],
            serialization.BestAvailableEncryption(password.encode()),
        )
        path = self.directory / "truststore.p12"
        path.write_bytes(data)
        return path

    @property
    def server(self) -> KeyPair:
        """The server certificate: SANs 127.0.0.1 and localhost, CN=localhost."""
        return self.issue("server", *SERVER_HOSTS, common_name="localhost")

    def client(
        self,
        common_name: str,
        *,
        organization: str = "sparklog",
        organizational_unit: str = "tests",
    ) -> KeyPair:
        """A client certificate whose subject is `CN=<cn>,OU=<ou>,O=<o>` (RFC 2253 order).
        It names a host too (`<cn>.clients.sparklog.test`): Java refuses a certificate whose
        subjectAltName extension is empty, which trustme writes when given no identity."""
        host = re.sub(r"[^a-z0-9-]+", "-", common_name.lower()).strip("-") or "client"
        return self.issue(
            f"client-{common_name}",
            f"{host}.clients.sparklog.test",
            common_name=common_name,
            organization_name=organization,
            organization_unit_name=organizational_unit,
        )

    def issue(self, name: str, *identities: str, **kwargs: object) -> KeyPair:
        """A certificate named `name` (issued once per distinct arguments)."""
        key = (name, identities, tuple(sorted(kwargs.items())))
        if key not in self._issued:
            leaf = self.ca.issue_cert(*identities, key_type=self.key_type, **kwargs)  # type: ignore[arg-type]
            slug = f"{name}-{len(self._issued)}" if name in {k[0] for k in self._issued} else name
            self._issued[key] = KeyPair(slug, leaf, self.directory)
        return self._issued[key]

    # -- settings ------------------------------------------------------------------------

    def server_props(
        self,
        *,
        client_auth: str = "none",
        keystore: str = "PEM",
        server: KeyPair | None = None,
        password: str = TEST_PASSWORD,
    ) -> dict[str, str]:
        """A server's `ssl.*` settings (Kafka's names); `keystore` is PEM (a file, key
        encrypted with `ssl.key.password`), PKCS12 or INLINE (`ssl.keystore.key` and
        `ssl.keystore.certificate.chain`)."""
        pair = server or self.server
        props = {"ssl.client.auth": client_auth, **self._trust_props()}
        return props | self._keystore_props(pair, keystore, password)

    def client_props(
        self,
        client: KeyPair | None = None,
        *,
        keystore: str = "PEM",
        password: str = TEST_PASSWORD,
    ) -> dict[str, str]:
        """A Kafka (Java or sparklog) client's `security.protocol=SSL` settings, with
        `client`'s certificate for mTLS when given."""
        props = {"security.protocol": "SSL", **self._trust_props()}
        if client is not None:
            props |= self._keystore_props(client, keystore, password)
        return props

    def librdkafka_props(self, client: KeyPair | None = None) -> dict[str, str]:
        """confluent-kafka's / kcat's `security.protocol=ssl` settings."""
        props = {"security.protocol": "ssl", "ssl.ca.location": str(self.ca_path)}
        if client is not None:
            props["ssl.certificate.location"] = str(client.cert_path)
            props["ssl.key.location"] = str(client.key_path)
        return props

    def _trust_props(self) -> dict[str, str]:
        return {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(self.ca_path)}

    @staticmethod
    def _keystore_props(pair: KeyPair, keystore: str, password: str) -> dict[str, str]:
        kind = keystore.upper()
        if kind == "PEM":
            return {
                "ssl.keystore.type": "PEM",
                "ssl.keystore.location": str(pair.keystore_pem(password)),
                "ssl.key.password": password,
            }
        if kind == "PKCS12":
            return {
                "ssl.keystore.type": "PKCS12",
                "ssl.keystore.location": str(pair.keystore_p12(password)),
                "ssl.keystore.password": password,
            }
        if kind == "INLINE":
            return {
                "ssl.keystore.type": "PEM",
                "ssl.keystore.key": pair.key_pem.decode(),
                "ssl.keystore.certificate.chain": pair.cert_pem.decode(),
            }
        raise ValueError(f"keystore={keystore!r}: use PEM, PKCS12 or INLINE")
