"""bench_vs_kafka's security cells (issue 30 §6): Apache Kafka and sparklog, each configured
with the same Kafka settings (`sparklog.oracle.kafka_security.OracleSecurity`: a SASL_SSL
listener with SCRAM-SHA-512/256 and PLAIN, an mTLS listener, StandardAuthorizer with
`super.users=User:admin`), certificates from a fresh trustme CA:

  sasl_ssl      confluent-kafka produce and consume (the 1 KB / 6-partition / RF=1 cell of the
                PLAINTEXT section, same settings) as `User:bench` over SASL_SSL SCRAM-SHA-512,
                with 1,000 ACLs loaded (plus bench's own grants, PREFIXED `bench-`): MB/s.
  no_authorizer the same produce on a cluster secured the same way but with no
                `authorizer.class.name`: what the 1,000 ACLs cost.
  auth          authentications per second: `--auth-threads` threads each opening new
                connections (TCP, TLS handshake, SaslHandshake, SCRAM-SHA-512 at 4,096
                iterations: scramp's client over sparklog's codec), then closing them.

Ratios: `sasl_ssl_produce_mb_s_vs_kafka`, `sasl_ssl_consume_mb_s_vs_kafka` (sparklog
SASL_SSL / Kafka SASL_SSL; target >= 0.9), `sasl_ssl_vs_plaintext_produce` and
`..._consume` (sparklog SASL_SSL / sparklog PLAINTEXT, the main section's cell; target >= 0.6),
`authentications_s_vs_kafka`, `acls_1000_vs_authorizer_off_produce` (sparklog; target >= 0.95)
and Kafka's own `kafka.acls_1000_vs_authorizer_off_produce` beside it.

SCRAM users: Kafka creates them when formatting its storage (`kafka-storage format
--add-scram`), sparklog's controller at start (`sparklog.add.scram`, the same syntax). A
sparklog that cannot be secured fails here with the reason printed, and its cells are left
out rather than the whole benchmark stopped.
"""

from __future__ import annotations

import argparse
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench_vs_kafka import LIBRDKAFKA, System, confluent_consume, create_topic
from bench_vs_kafka import _confluent_produce_with_cpu as produce_with_cpu

from sparklog.oracle.kafka_security import SASL_SSL, SSL, OracleSecurity
from sparklog.oracle.kafka_server import ApacheKafka, free_port

USER, PASSWORD = "bench", "bench-secret"
PREFIX = "bench-"  # create_topic's names
ACL_COUNT = 1_000
KEYSTORE_PASSWORD = "bench-keystore"
DEFINITIONS = {
    "sasl_ssl_produce_mb_s_vs_kafka": "confluent produce 1KB/6p/RF=1 over SASL_SSL SCRAM-SHA-512, "
    "1,000 ACLs: sparklog / Kafka",
    "sasl_ssl_consume_mb_s_vs_kafka": "confluent consume (assign) of that topic over SASL_SSL: "
    "sparklog / Kafka",
    "sasl_ssl_vs_plaintext_produce": "sparklog produce over SASL_SSL / over PLAINTEXT (same cell)",
    "sasl_ssl_vs_plaintext_consume": "sparklog consume over SASL_SSL / over PLAINTEXT (same cell)",
    "authentications_s_vs_kafka": "new TLS connections authenticated with SCRAM-SHA-512 per "
    "second: sparklog / Kafka",
    "acls_1000_vs_authorizer_off_produce": "SASL_SSL produce with 1,000 ACLs / with no "
    "authorizer (sparklog; kafka.acls_1000_vs_authorizer_off_produce: Kafka's)",
}


class Certificates:
    """A trustme CA, the brokers' PKCS12 key store (Kafka on Java 17 cannot read PBES2-encrypted
    PEM keys) and the CA file clients trust."""

    def __init__(self, directory: Path) -> None:
        import trustme
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.serialization import pkcs12

        ca = trustme.CA(organization_name="sparklog bench")
        leaf = ca.issue_cert("127.0.0.1", "localhost", common_name="localhost")
        self.ca_file = directory / "ca.pem"
        ca.cert_pem.write_to_path(str(self.ca_file))
        from cryptography import x509

        key = serialization.load_pem_private_key(leaf.private_key_pem.bytes(), None)
        cert = x509.load_pem_x509_certificate(leaf.cert_chain_pems[0].bytes())
        self.keystore = directory / "broker.p12"
        self.keystore.write_bytes(
            pkcs12.serialize_key_and_certificates(
                b"broker",
                key,  # type: ignore[arg-type]
                cert,
                None,
                serialization.BestAvailableEncryption(KEYSTORE_PASSWORD.encode()),
            )
        )

    def security(self, authorizer: bool) -> OracleSecurity:
        server_ssl = {
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": str(self.keystore),
            "ssl.keystore.password": KEYSTORE_PASSWORD,
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca_file),
        }
        return OracleSecurity(
            self.ca_file, server_ssl, scram_users={USER: PASSWORD}, authorizer=authorizer
        )


def client_config(security: OracleSecurity) -> dict[str, Any]:
    """librdkafka settings for the bench user over SASL_SSL SCRAM-SHA-512."""
    return {
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": USER,
        "sasl.password": PASSWORD,
        "ssl.ca.location": str(security.ca_file),
    }


@contextmanager
def secured_kafka(security: OracleSecurity) -> Iterator[System]:
    with tempfile.TemporaryDirectory(prefix="bench-kafka-sasl-") as d:
        config = {"num.partitions": "1", "default.replication.factor": "1"}
        with ApacheKafka(d, config=config, security=security) as kafka:
            yield System(
                "kafka", kafka.bootstrap(SASL_SSL), kafka.pids, client=client_config(security)
            )


@contextmanager
def secured_sparklog(security: OracleSecurity) -> Iterator[System]:
    """`sparklog serve --master none` with the same settings (no KRaft controller listener:
    the driver's controller has its own), SCRAM users from `sparklog.add.scram`."""
    from sparklog.cli.common import default_config_file, read_properties_file

    ports = {SASL_SSL: free_port(), SSL: free_port()}
    props = {
        k: v
        for k, v in security.properties(ports, controller_port=None).items()
        if "controller" not in k
    }
    with tempfile.TemporaryDirectory(prefix="bench-sparklog-sasl-") as d:
        defaults = default_config_file()
        scram = ";".join(security.format_arguments()[1::2])  # as kafka-storage format takes them
        settings = (read_properties_file(defaults) if defaults else {}) | props
        settings["sparklog.add.scram"] = scram
        # the defaults file may name the inter-broker listener by protocol; Kafka refuses both
        settings.pop("security.inter.broker.protocol", None)
        conf = Path(d) / "server.properties"  # a file: the JAAS passwords stay out of `ps`
        conf.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        cmd = [sys.executable, "-m", "sparklog", "serve", "--master", "none", "--brokers", "1",
               "--data-dir", str(Path(d) / "data"), "--config-file", str(conf)]  # fmt: skip
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert proc.stdout is not None and proc.stderr is not None
        ready = any(line.startswith("bootstrap.servers=") for line in proc.stdout)
        if not ready:
            proc.wait(60)
            raise RuntimeError(f"sparklog serve did not start: {proc.stderr.read()[-1500:]}")
        for stream in (proc.stdout, proc.stderr):
            threading.Thread(target=stream.read, daemon=True).start()
        try:
            bootstrap = f"127.0.0.1:{ports[SASL_SSL]}"
            yield System("sparklog", bootstrap, [proc.pid], client=client_config(security))
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)


def _admin(security: OracleSecurity, bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient(security.admin_client_config(bootstrap) | LIBRDKAFKA)


def load_acls(security: OracleSecurity, bootstrap: str) -> None:
    """bench's grants (ALL on `bench-` topics and groups, PREFIXED) and 1,000 ACLs for other
    principals and resources (literal and prefixed, allow and deny), as an authorizer in a
    shared cluster holds them."""
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    allow, deny = AclPermissionType.ALLOW, AclPermissionType.DENY
    bindings = [
        AclBinding(kind, PREFIX, ResourcePatternType.PREFIXED, f"User:{USER}", "*",
                   AclOperation.ALL, allow)
        for kind in (ResourceType.TOPIC, ResourceType.GROUP)
    ]  # fmt: skip
    for i in range(ACL_COUNT):
        pattern = ResourcePatternType.PREFIXED if i % 4 == 0 else ResourcePatternType.LITERAL
        kind = ResourceType.GROUP if i % 5 == 0 else ResourceType.TOPIC
        operation = (AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE)[i % 3]
        bindings.append(
            AclBinding(kind, f"team-{i % 37}-res-{i}", pattern, f"User:user-{i % 97}",
                       "*", operation, deny if i % 10 == 0 else allow)
        )  # fmt: skip
    admin = _admin(security, bootstrap)
    for future in admin.create_acls(bindings, request_timeout=60).values():
        future.result()


def authenticate_once(bootstrap: str, ca_file: Path) -> None:
    """One new connection: TCP, the TLS handshake, SaslHandshake v1 and the two SaslAuthenticate
    round trips of SCRAM-SHA-512 (scramp's client, as the tests use it), then close. Raw Kafka
    requests through sparklog's sans-IO codec: what is timed is the server's work, not a client
    library's start-up and shutdown."""
    import scramp

    from sparklog.protocol import codec, kio_build
    from sparklog.protocol.connection import NEED_DATA, ClientConnection

    host, _, port = bootstrap.rpartition(":")
    context = ssl.create_default_context(cafile=str(ca_file))
    with (
        socket.create_connection((host, int(port)), timeout=30) as raw,
        context.wrap_socket(raw, server_hostname=host) as sock,
    ):
        conn = ClientConnection("bench-auth")

        def ask(api_key: int, version: int, **fields: Any) -> Any:
            sock.sendall(conn.send_request(
                kio_build.build(codec.request_schema(api_key, version), fields))[1])  # fmt: skip
            while (item := conn.next_response()) is NEED_DATA:
                chunk = sock.recv(65536)
                if not chunk:
                    raise ConnectionError("closed during authentication")
                conn.receive_data(chunk)
            return item[1]

        assert ask(17, 1, mechanism="SCRAM-SHA-512").error_code == 0
        client = scramp.ScramClient(["SCRAM-SHA-512"], USER, PASSWORD)
        first = ask(36, 2, auth_bytes=client.get_client_first().encode())
        assert first.error_code == 0, first.error_message
        client.set_server_first(first.auth_bytes.decode())
        final = ask(36, 2, auth_bytes=client.get_client_final().encode())
        assert final.error_code == 0, final.error_message
        client.set_server_final(final.auth_bytes.decode())


def authentications_per_s(system: System, count: int, threads: int, ca_file: Path) -> float:
    """Completed SASL_SSL SCRAM-SHA-512 authentications per second, `threads` at a time."""
    bootstrap = system.bootstrap.split(",")[0]
    authenticate_once(bootstrap, ca_file)  # warm: the server's first SCRAM lookup, JIT
    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda _: authenticate_once(bootstrap, ca_file), range(count)))
    return count / (time.perf_counter() - started)


def _produce_consume(system: System, args: argparse.Namespace, records: int) -> tuple[dict, dict]:
    """The fastest of --rounds produce runs and of --rounds consume runs, 1 KB / 6 partitions."""
    produced, consumed, topics = [], [], []
    for _ in range(args.rounds):
        topics.append(create_topic(system.bootstrap, 6, 1, client=system.client))
        produced.append(produce_with_cpu(system, topics[-1], records, 1000))
    for topic in topics:
        consumed.append(
            confluent_consume(system.bootstrap, topic, 6, records, 1000, client=system.client)
        )
    fastest = lambda runs: max(runs, key=lambda run: run["mb_s"])  # noqa: E731
    return fastest(produced), fastest(consumed)


def security_cells(args: argparse.Namespace, out: dict) -> None:
    """Every security cell, Kafka then sparklog; a sparklog that cannot be secured yet is
    reported (`sparklog.sasl_ssl.unavailable`) and its ratios left out."""
    records = int(args.mb * 1e6 / 1000)
    with tempfile.TemporaryDirectory(prefix="bench-certs-") as d:
        certs = Certificates(Path(d))
        for name, secured in (("kafka", secured_kafka), ("sparklog", secured_sparklog)):
            try:
                with secured(certs.security(authorizer=True)) as system:
                    load_acls(certs.security(True), system.bootstrap)
                    time.sleep(1)  # the ACLs reach the broker through the metadata log
                    produced, consumed = _produce_consume(system, args, records)
                    out[f"{name}.sasl_ssl.produce"] = produced
                    out[f"{name}.sasl_ssl.consume"] = consumed
                    out[f"{name}.sasl_ssl.auth"] = {
                        "authentications_s": authentications_per_s(
                            system, args.auth_count, args.auth_threads, certs.ca_file
                        )
                    }
                with secured(certs.security(authorizer=False)) as system:
                    produced, _ = _produce_consume(system, args, records)
                    out[f"{name}.sasl_ssl.produce_no_authorizer"] = produced
            except Exception as exc:  # noqa: BLE001 (reported; the other cells still run)
                out[f"{name}.sasl_ssl.unavailable"] = f"{type(exc).__name__}: {exc}"[:500]
                print(f"  {name} SASL_SSL: unavailable: {exc}"[:500], file=sys.stderr)
                continue
            print(
                f"  {name} SASL_SSL: produce {out[f'{name}.sasl_ssl.produce']['mb_s']:.1f} MB/s "
                f"(no authorizer {out[f'{name}.sasl_ssl.produce_no_authorizer']['mb_s']:.1f}), "
                f"consume {out[f'{name}.sasl_ssl.consume']['mb_s']:.1f} MB/s, "
                f"{out[f'{name}.sasl_ssl.auth']['authentications_s']:.0f} authentications/s"
            )
    out["security_headline"] = security_headline(out)


def security_headline(out: dict) -> dict[str, float]:
    """The ratios whose inputs exist (sparklog's need its secured cells)."""
    ratios: dict[str, float] = {}
    for name in ("kafka", "sparklog"):
        if f"{name}.sasl_ssl.produce" in out:
            key = "acls_1000_vs_authorizer_off_produce"
            ratios[key if name == "sparklog" else f"kafka.{key}"] = (
                out[f"{name}.sasl_ssl.produce"]["mb_s"]
                / out[f"{name}.sasl_ssl.produce_no_authorizer"]["mb_s"]
            )
    if "sparklog.sasl_ssl.produce" not in out or "kafka.sasl_ssl.produce" not in out:
        return ratios
    s, k = "sparklog.sasl_ssl", "kafka.sasl_ssl"
    ratios["sasl_ssl_produce_mb_s_vs_kafka"] = (
        out[f"{s}.produce"]["mb_s"] / out[f"{k}.produce"]["mb_s"]
    )
    ratios["sasl_ssl_consume_mb_s_vs_kafka"] = (
        out[f"{s}.consume"]["mb_s"] / out[f"{k}.consume"]["mb_s"]
    )
    ratios["authentications_s_vs_kafka"] = (
        out[f"{s}.auth"]["authentications_s"] / out[f"{k}.auth"]["authentications_s"]
    )
    plain = "1KB_p6_rf1"
    if f"sparklog.confluent_produce.{plain}" in out:
        ratios["sasl_ssl_vs_plaintext_produce"] = (
            out[f"{s}.produce"]["mb_s"] / out[f"sparklog.confluent_produce.{plain}"]["mb_s"]
        )
        ratios["sasl_ssl_vs_plaintext_consume"] = (
            out[f"{s}.consume"]["mb_s"] / out[f"sparklog.confluent_consume.{plain}"]["mb_s"]
        )
    return ratios
