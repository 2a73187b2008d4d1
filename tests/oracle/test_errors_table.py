"""sparklog's error table against Apache Kafka's `Errors` enum, read from the pinned JARs.

Every code Kafka 4.x defines has one class here with Kafka's name and retriable flag (Kafka's:
the code's exception is a `RetriableException`). This caught NEW_LEADER_ELECTED, which sparklog
sent as 106 (Kafka's FETCH_SESSION_TOPIC_ID_ERROR) where Kafka sends 108.
"""

from __future__ import annotations

import subprocess

import pytest

from sparklog import errors
from sparklog.jars import JarsMissing, kafka_classpath
from sparklog.oracle.kafka_server import java_available

pytestmark = pytest.mark.oracle

# Run by Java's single-file source launcher (JEP 330): no javac, no build directory.
_LIST_ERRORS = """
import org.apache.kafka.common.errors.RetriableException;
import org.apache.kafka.common.protocol.Errors;
public class ListErrors {
    public static void main(String[] args) {
        for (Errors e : Errors.values()) {
            System.out.println(e.code() + " " + e.name() + " "
                + (e.exception() instanceof RetriableException));
        }
    }
}
"""


@pytest.fixture(scope="module")
def kafka_errors(tmp_path_factory) -> dict[int, tuple[str, bool]]:
    if not java_available():
        pytest.skip("java is not installed: the Apache Kafka oracle needs a JDK >= 17")
    try:
        classpath = kafka_classpath()
    except JarsMissing as e:
        pytest.fail(str(e))
    source = tmp_path_factory.mktemp("errors") / "ListErrors.java"
    source.write_text(_LIST_ERRORS)
    done = subprocess.run(
        ["java", "-cp", classpath, str(source)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    table = {}
    for line in done.stdout.split("\n"):
        if line.strip():
            code, name, retriable = line.split()
            table[int(code)] = (name, retriable == "true")
    return table


def test_every_kafka_error_code_has_its_class(kafka_errors):
    ours = {code: (cls.name, cls.retriable) for code, cls in errors.BY_CODE.items()}
    theirs = {code: v for code, v in kafka_errors.items() if code != 0}  # NONE is no error
    missing = sorted(set(theirs) - set(ours))
    wrong = {
        c: (ours[c], theirs[c]) for c in sorted(set(ours) & set(theirs)) if ours[c] != theirs[c]
    }
    extra = sorted(set(ours) - set(theirs))
    assert not missing and not wrong and not extra, (
        f"missing codes {missing}; (sparklog, Kafka) differ for {wrong}; not Kafka's: {extra}"
    )


def test_lookups_by_code_and_name_agree(kafka_errors):
    for code, (name, _) in kafka_errors.items():
        if code == 0:
            continue
        assert errors.error_for_code(code) is errors.error_for_name(name)
        assert errors.error_for_code(code).code == code
