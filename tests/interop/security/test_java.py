"""Kafka's Java clients (the reference implementation) over SASL_SSL SCRAM-SHA-512 and mTLS,
against Apache Kafka and sparklog secured the same way (conftest.py): Admin, an idempotent
KafkaProducer, a KafkaConsumer in a group, a committed and an aborted transaction read back
read_committed (tests/interop/java/SecureJavaClients.java), as User:alice."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.support.secure_clusters import SecureTarget

from ..java_tools import compile_java
from .test_client_matrix import RECORDS, TXN_RECORDS, names

pytestmark = [pytest.mark.interop, pytest.mark.oracle]


@pytest.fixture(scope="module")
def class_path(tmp_path_factory):
    return compile_java("SecureJavaClients.java", tmp_path_factory.mktemp("java-secure"))


def test_java_clients(target: SecureTarget, auth: str, class_path: str, tmp_path) -> None:
    props = tmp_path / "client.properties"
    # a properties file, not the command line: the password stays out of `ps`
    props.write_text("".join(f"{k}={v}\n" for k, v in target.java(auth).items()))
    props.chmod(0o600)
    topic, group, txn = names("java", auth)
    done = subprocess.run(
        ["java", "-Dlog4j2.rootLogger.level=WARN", "-cp", class_path, "SecureJavaClients",
         str(props), topic, group, txn, str(RECORDS), str(TXN_RECORDS)],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    out: dict = {}
    for line in done.stdout.splitlines():
        if line.startswith("{"):
            out.update(json.loads(line))
    assert out["created"] == topic and out["deleted"] == topic
    assert out["produced"] == RECORDS
    assert out["group"] == {"consumed": RECORDS, "committed": RECORDS}
    assert out["read_committed"] == {
        "count": RECORDS + TXN_RECORDS,
        "committed": TXN_RECORDS,
        "aborted": 0,
    }
