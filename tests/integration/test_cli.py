"""`python -m sparklog ...` as a user runs it: subprocesses against embedded brokers, and one
`serve --master none` stopped with a signal."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from sparklog.client import KafkaConsumer, TopicPartition
from sparklog.client.broker_connection import now_ms

CLI_TIMEOUT_S = 60
SERVE_START_TIMEOUT_S = 60


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def sparklog(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    """Run the CLI to completion; stdout as bytes, stderr as text."""
    result = subprocess.run(
        [sys.executable, "-m", "sparklog", *args],
        input=stdin,
        capture_output=True,
        timeout=CLI_TIMEOUT_S,
    )
    result.stderr = result.stderr.decode(errors="replace")
    return result


def ok(*args: str, stdin: bytes | None = None) -> str:
    result = sparklog(*args, stdin=stdin)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    return result.stdout.decode()


def user_error(*args: str, stdin: bytes | None = None) -> str:
    """Run a command that must fail as a user error: exit 1, one clear line, no traceback."""
    result = sparklog(*args, stdin=stdin)
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith("error: "), result.stderr
    return result.stderr


def read_log(bootstrap: str, topic: str, partitions: int, count: int) -> list:
    """Every record of `topic` through the sparklog consumer (an independent look)."""
    with KafkaConsumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest"}) as c:
        c.assign([TopicPartition(topic, p) for p in range(partitions)])
        got: list = []
        deadline = now_ms() + 20_000
        while len(got) < count and now_ms() < deadline:
            got += c.poll(200)
        return got


# -------------------------------------------------------------------------------- topics


def test_topics_create_list_describe_delete(cluster):
    bs = cluster.bootstrap_servers
    topic = unique("cli")
    out = ok(
        "topics",
        "create",
        "--bootstrap-server",
        bs,
        "--topic",
        topic,
        "--partitions",
        "3",
        "--config",
        "retention.ms=3600000",
        "--config",
        "cleanup.policy=delete",
    )
    assert out == f"Created topic {topic}.\n"
    assert topic in ok("topics", "list", "--bootstrap-server", bs).splitlines()

    lines = ok("topics", "describe", "--bootstrap-server", bs, "--topic", topic).splitlines()
    head = dict(field.split(": ", 1) for field in lines[0].split("\t"))
    assert head["Topic"] == topic
    assert head["PartitionCount"] == "3"
    assert head["ReplicationFactor"] == "1"
    assert set(head["Configs"].split(",")) == {"retention.ms=3600000", "cleanup.policy=delete"}
    partitions = [dict(f.split(": ", 1) for f in line.strip().split("\t")) for line in lines[1:]]
    assert [p["Partition"] for p in partitions] == ["0", "1", "2"]
    assert all(p["Leader"] == "0" and p["Replicas"] == "0" and p["Isr"] == "0" for p in partitions)

    assert f"Topic: {topic}\t" in ok("topics", "describe", "--bootstrap-server", bs)
    assert "already exists" in user_error(
        "topics", "create", "--bootstrap-server", bs, "--topic", topic
    )
    ok("topics", "create", "--bootstrap-server", bs, "--topic", topic, "--if-not-exists")

    assert (
        ok("topics", "delete", "--bootstrap-server", bs, "--topic", topic)
        == f"Deleted topic {topic}.\n"
    )
    assert topic not in ok("topics", "list", "--bootstrap-server", bs).splitlines()
    assert "does not exist" in user_error(
        "topics", "delete", "--bootstrap-server", bs, "--topic", topic
    )


def test_topic_errors_name_the_problem(cluster):
    bs = cluster.bootstrap_servers
    assert "does not exist" in user_error(
        "topics", "describe", "--bootstrap-server", bs, "--topic", "no-such-topic"
    )
    assert "InvalidTopicError" in user_error(
        "topics", "create", "--bootstrap-server", bs, "--topic", "bad/name"
    )
    assert "InvalidReplicationFactor" in user_error(
        "topics",
        "create",
        "--bootstrap-server",
        bs,
        "--topic",
        unique("rf"),
        "--replication-factor",
        "3",
    )
    assert "nonsense.setting" in user_error(
        "topics",
        "create",
        "--bootstrap-server",
        bs,
        "--topic",
        unique("c"),
        "--config",
        "nonsense.setting=1",
    )
    assert "name=value" in user_error(
        "topics", "create", "--bootstrap-server", bs, "--topic", unique("c"), "--config", "novalue"
    )
    assert "needs a topic" in user_error("topics", "create", "--bootstrap-server", bs)


def closed_port() -> int:
    """A loopback port nobody listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_unreachable_or_malformed_bootstrap_fails_fast():
    message = user_error("topics", "list", "--bootstrap-server", f"127.0.0.1:{closed_port()}")
    assert "cannot connect to any bootstrap server" in message
    assert "invalid address" in user_error(
        "consume", "--bootstrap-server", "nohostport", "--topic", "t"
    )


# ------------------------------------------------------------------------- produce/consume


def test_produce_with_keys_then_consume_from_beginning(cluster):
    bs = cluster.bootstrap_servers
    topic = unique("pc")
    ok("topics", "create", "--bootstrap-server", bs, "--topic", topic, "--partitions", "1")
    lines = [f"k{i}:value {i}:with colon" for i in range(20)]
    ok(
        "produce",
        "--bootstrap-server",
        bs,
        "--topic",
        topic,
        "--key-separator",
        ":",
        "--header",
        "source=cli",
        stdin=("\n".join(lines) + "\n").encode(),
    )

    records = read_log(bs, topic, 1, 20)
    assert [(r.key, r.value, r.offset) for r in records] == [
        (f"k{i}".encode(), f"value {i}:with colon".encode(), i) for i in range(20)
    ]
    assert all(r.headers == (("source", b"cli"),) for r in records)

    out = ok(
        "consume",
        "--bootstrap-server",
        bs,
        "--topic",
        topic,
        "--from-beginning",
        "--max-messages",
        "20",
        "--print-key",
    )
    assert out.splitlines() == [line.replace(":", "\t", 1) for line in lines]
    out = ok(
        "consume",
        "--bootstrap-server",
        bs,
        "--topic",
        topic,
        "--partition",
        "0",
        "--offset",
        "18",
        "--max-messages",
        "2",
        "--print-offset",
        "--print-headers",
    )
    assert out.splitlines() == [
        "Offset:18\tsource:cli\tvalue 18:with colon",
        "Offset:19\tsource:cli\tvalue 19:with colon",
    ]


def test_produce_without_keys_to_chosen_partition_and_consume_with_idle_timeout(cluster):
    bs = cluster.bootstrap_servers
    topic = unique("pv")
    ok("topics", "create", "--bootstrap-server", bs, "--topic", topic, "--partitions", "2")
    ok(
        "produce",
        "--bootstrap-server",
        bs,
        "--topic",
        topic,
        "--partition",
        "1",
        "--property",
        "acks=1",
        "--property",
        "compression.type=zstd",
        stdin=b"a\nb\nc\n",
    )
    records = read_log(bs, topic, 2, 3)
    assert [(r.partition, r.offset, r.key, r.value) for r in records] == [
        (1, 0, None, b"a"),
        (1, 1, None, b"b"),
        (1, 2, None, b"c"),
    ]
    # no --max-messages: it stops after --timeout-ms without a record
    result = sparklog(
        "consume",
        "--bootstrap-server",
        bs,
        "--topic",
        topic,
        "--from-beginning",
        "--timeout-ms",
        "1500",
        "--print-partition",
        "--print-key",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode().splitlines() == [
        "Partition:1\tnull\ta",
        "Partition:1\tnull\tb",
        "Partition:1\tnull\tc",
    ]
    assert "Processed a total of 3 messages" in result.stderr


def test_consume_and_produce_errors(cluster):
    bs = cluster.bootstrap_servers
    topic = unique("err")
    assert "does not exist" in user_error("consume", "--bootstrap-server", bs, "--topic", topic)
    ok("topics", "create", "--bootstrap-server", bs, "--topic", topic)
    assert "no partition 5" in user_error(
        "consume", "--bootstrap-server", bs, "--topic", topic, "--partition", "5"
    )
    assert "--offset needs --partition" in user_error(
        "consume", "--bootstrap-server", bs, "--topic", topic, "--offset", "3"
    )
    assert "line 2 has no key separator" in user_error(
        "produce",
        "--bootstrap-server",
        bs,
        "--topic",
        topic,
        "--key-separator",
        ":",
        stdin=b"k:v\nnokey\n",
    )
    assert "linger.ms" in user_error(
        "produce",
        "--bootstrap-server",
        bs,
        "--topic",
        topic,
        "--property",
        "linger.ms=soon",
        stdin=b"x\n",
    )


# ---------------------------------------------------------------------------------- serve


def _children(pid: int) -> set[int]:
    """Direct children of `pid`, from /proc."""
    out = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.add(int(entry.name))
    return out


class Served:
    """A `python -m sparklog serve` subprocess and its bootstrap line."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sparklog", "serve", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        line: list[bytes] = []
        reader = threading.Thread(target=lambda: line.append(self.proc.stdout.readline()))
        reader.start()
        reader.join(SERVE_START_TIMEOUT_S)
        if not line or not line[0].startswith(b"bootstrap.servers="):
            self.proc.kill()
            _, err = self.proc.communicate()
            pytest.fail(f"serve printed {line!r} instead of the bootstrap line: {err.decode()}")
        self.bootstrap = line[0].decode().strip().split("=", 1)[1]

    def stop(self, sig: int) -> tuple[int, str]:
        children = _children(self.proc.pid)
        self.proc.send_signal(sig)
        try:
            _, err = self.proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise
        deadline = time.monotonic() + 10  # children of a killed serve go on their own
        while (leftovers := [pid for pid in children if _running(pid)]) and (
            time.monotonic() < deadline
        ):
            time.sleep(0.1)
        assert leftovers == [], f"serve left child processes behind: {leftovers}"
        return self.proc.returncode, err.decode()


@pytest.mark.slow
def test_serve_without_spark_serves_stops_on_signals_and_keeps_data(tmp_path):
    data_dir = tmp_path / "served"
    served = Served(
        "--master",
        "none",
        "--brokers",
        "2",
        "--data-dir",
        str(data_dir),
        "--config",
        "num.partitions=2",
        "--config",
        "broker.heartbeat.interval.ms=200",
    )
    try:
        assert len(served.bootstrap.split(",")) == 2
        topic = unique("served")
        ok(
            "produce",
            "--bootstrap-server",
            served.bootstrap,
            "--topic",
            topic,
            "--key-separator",
            "=",
            stdin=b"a=1\nb=2\nc=3\n",
        )
        out = ok("topics", "describe", "--bootstrap-server", served.bootstrap, "--topic", topic)
        assert "PartitionCount: 2" in out  # num.partitions from --config, topic auto-created
    finally:
        code, err = served.stop(signal.SIGTERM)
    assert code == 0, err
    assert "Traceback" not in err
    # brokers stop before the controller: no broker complains that it is gone
    assert "from the controller failed" not in err and "WARNING" not in err, err
    assert (data_dir / "controller").is_dir()

    # the same data dir again: the identity, the topic and its records are back
    again = Served("--master", "none", "--brokers", "2", "--data-dir", str(data_dir))
    try:
        out = ok(
            "consume",
            "--bootstrap-server",
            again.bootstrap,
            "--topic",
            topic,
            "--from-beginning",
            "--max-messages",
            "3",
            "--print-key",
        )
        assert sorted(out.splitlines()) == ["a\t1", "b\t2", "c\t3"]
    finally:
        code, err = again.stop(signal.SIGINT)
    assert code == 0, err
    assert "Traceback" not in err


@pytest.mark.slow
def test_serve_with_broker_processes_replicates_and_leaves_no_broker_behind(tmp_path):
    """`--broker-processes`: each broker in a child process of its own, replicating as usual;
    a parent killed with SIGKILL takes its brokers with it (they see the pipe break)."""
    served = Served(
        "--master",
        "none",
        "--brokers",
        "2",
        "--broker-processes",
        "--data-dir",
        str(tmp_path / "served"),
        "--config",
        "default.replication.factor=2",
        "--config",
        "broker.heartbeat.interval.ms=200",
    )
    try:
        brokers = [
            pid
            for pid in _children(served.proc.pid)
            if b"sparklog" in Path(f"/proc/{pid}/cmdline").read_bytes()
            or b"multiprocessing" in Path(f"/proc/{pid}/cmdline").read_bytes()
        ]
        assert len(brokers) >= 2, brokers
        topic = unique("apart")
        ok("topics", "create", "--bootstrap-server", served.bootstrap, "--topic", topic,
           "--partitions", "2", "--replication-factor", "2")  # fmt: skip
        ok("produce", "--bootstrap-server", served.bootstrap, "--topic", topic,
           "--key-separator", "=", "--property", "acks=all", stdin=b"a=1\nb=2\nc=3\n")  # fmt: skip
        out = ok("consume", "--bootstrap-server", served.bootstrap, "--topic", topic,
                 "--from-beginning", "--max-messages", "3", "--print-key")  # fmt: skip
        assert sorted(out.splitlines()) == ["a\t1", "b\t2", "c\t3"]
        described = ok("topics", "describe", "--bootstrap-server", served.bootstrap,
                       "--topic", topic)  # fmt: skip
        assert described.count("Isr: 0,1") + described.count("Isr: 1,0") == 2, described
    finally:
        code, _err = served.stop(signal.SIGKILL)  # asserts that no child outlives it
    assert code == -signal.SIGKILL


def test_serve_refuses_bad_arguments(tmp_path):
    assert "at least one broker" in user_error("serve", "--master", "none", "--brokers", "0")
    assert "--master none" in user_error(
        "serve", "--master", "local[2]", "--broker-processes", "--data-dir", str(tmp_path)
    )
    missing = tmp_path / "missing.conf"
    assert "cannot read" in user_error("serve", "--master", "none", "--config-file", str(missing))


def test_serve_refuses_listeners_that_cannot_work(tmp_path):
    """A fixed port shared by several brokers on one host, or one already held, is refused
    before anything starts (it was a bind traceback from the second broker)."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        fixed = f"listeners=PLAINTEXT://127.0.0.1:{port}"
        shared = user_error("serve", "--master", "none", "--brokers", "2", "--config", fixed)
        assert "2 brokers on one host cannot all listen on" in shared and "port 0" in shared
        assert f"cannot listen on PLAINTEXT://127.0.0.1:{port}" in user_error(
            "serve", "--master", "none", "--data-dir", str(tmp_path), "--config", fixed
        )
    assert not list(tmp_path.iterdir())  # refused before a controller or broker wrote anything


def _descendants(pid: int) -> set[int]:
    found, frontier = set(), {pid}
    while frontier:
        frontier = set().union(*(_children(p) for p in frontier)) - found
        found |= frontier
    return found


def _running(pid: int) -> bool:
    """Alive and not a zombie (an exited child its new parent has not reaped yet)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
@pytest.mark.spark
def test_serve_on_spark_stops_with_sigterm_and_leaves_no_process(tmp_path):
    """The default master (local[brokers+1]): brokers are Spark tasks; SIGTERM stops them, the
    session and its JVM (and the JVM's Python workers) before serve exits."""
    served = Served("--brokers", "1", "--data-dir", str(tmp_path / "spark-served"))
    try:
        descendants = _descendants(served.proc.pid)
        topic = unique("spark")
        ok("produce", "--bootstrap-server", served.bootstrap, "--topic", topic, stdin=b"x\ny\n")
        out = ok(
            "consume",
            "--bootstrap-server",
            served.bootstrap,
            "--topic",
            topic,
            "--from-beginning",
            "--max-messages",
            "2",
        )
        assert out.splitlines() == ["x", "y"]
        assert descendants, "Spark's JVM should be a child of serve"
    finally:
        code, err = served.stop(signal.SIGTERM)
    assert code == 0, err
    assert "from the controller failed" not in err, err
    assert [pid for pid in descendants if _running(pid)] == []
    assert (tmp_path / "spark-served" / "brokers").is_dir()  # log.dirs under --data-dir
