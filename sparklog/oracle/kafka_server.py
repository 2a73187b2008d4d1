"""Apache Kafka itself on loopback: the oracle tests and benchmarks hold sparklog against.

`ApacheKafka(data_dir, brokers=N).start()` formats and starts a KRaft cluster from the pinned
JARs (`sparklog.jars`): node 1 is a combined controller+broker, nodes 2..N are brokers
only; every listener binds 127.0.0.1 on a free port; each JVM is capped with `-Xmx`. It is a
context manager; `stop()` ends every process it started. `pids` gives the broker processes so
benchmarks can read their CPU time and RSS from /proc.

`security=OracleSecurity(...)` (see `kafka_security`) serves SASL_SSL and mTLS listeners with
SCRAM users created at format time and Kafka's StandardAuthorizer instead of PLAINTEXT;
`bootstrap_servers` then names the SASL_SSL listener and `bootstrap(listener)` any of them.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

from sparklog.jars import kafka_classpath
from sparklog.oracle.kafka_security import CLIENT_LISTENERS, OracleSecurity

_LOG4J2 = """\
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log_file}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = {level}
rootLogger.appenderRef.file.ref = file
"""


class KafkaNotStarted(RuntimeError):
    """Apache Kafka did not come up; carries the tail of its log."""


def java_available() -> bool:
    return shutil.which("java") is not None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ApacheKafka:
    """A KRaft Apache Kafka cluster of `brokers` nodes under `data_dir` (see module doc)."""

    def __init__(
        self,
        data_dir: str | Path,
        brokers: int = 1,
        heap: str = "1g",
        config: dict[str, str] | None = None,
        log_level: str = "WARN",
        security: OracleSecurity | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.brokers = brokers
        self.heap = heap
        self.config = dict(config or {})
        self.log_level = log_level
        self.cluster_id = _cluster_id()
        self.security = security
        self.ports = [free_port() for _ in range(brokers)]
        # per secured client listener, one port per node (SASL_SSL's are `ports`)
        self.listener_ports: dict[str, list[int]] = {"PLAINTEXT": self.ports}
        if security is not None:
            self.listener_ports = {CLIENT_LISTENERS[0]: self.ports}
            for name in CLIENT_LISTENERS[1:]:
                self.listener_ports[name] = [free_port() for _ in range(brokers)]
        self.controller_port = free_port()
        self._procs: list[subprocess.Popen] = []

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"127.0.0.1:{port}" for port in self.ports)

    def bootstrap(self, listener: str) -> str:
        """The bootstrap servers of one listener (PLAINTEXT, or SASL_SSL / SSL when secured)."""
        return ",".join(f"127.0.0.1:{port}" for port in self.listener_ports[listener])

    @property
    def pids(self) -> list[int]:
        return [proc.pid for proc in self._procs]

    def node_dir(self, node_id: int) -> Path:
        return self.data_dir / f"node-{node_id}"

    def log_dir(self, node_id: int = 1) -> Path:
        """The `log.dirs` of one node (partition folders live here)."""
        return self.node_dir(node_id) / "logs"

    def _properties(self, node_id: int) -> dict[str, str]:
        voters = f"1@127.0.0.1:{self.controller_port}"
        port = self.ports[node_id - 1]
        props = {
            "node.id": str(node_id),
            "controller.quorum.voters": voters,
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.log_dir(node_id)),
            "num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
        }
        if node_id == 1:
            props["process.roles"] = "broker,controller"
            props["listeners"] = (
                f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{self.controller_port}"
            )
        else:
            props["process.roles"] = "broker"
            props["listeners"] = f"PLAINTEXT://127.0.0.1:{port}"
        props["advertised.listeners"] = f"PLAINTEXT://127.0.0.1:{port}"
        if self.security is not None:
            ports = {name: p[node_id - 1] for name, p in self.listener_ports.items()}
            controller = self.controller_port if node_id == 1 else None
            props.update(self.security.properties(ports, controller))
        props.update(self.config)
        return props

    def _java(self, main_class: str, *args: str, node_dir: Path) -> list[str]:
        log4j = node_dir / "log4j2.properties"
        log4j.write_text(_LOG4J2.format(log_file=node_dir / "server.log", level=self.log_level))
        return [
            "java", f"-Xmx{self.heap}", f"-Xms{min(256, _mb(self.heap))}m",
            "-XX:+UseG1GC", "-Djava.awt.headless=true", "-Djava.net.preferIPv4Stack=true",
            f"-Dlog4j2.configurationFile={log4j}", "-cp", kafka_classpath(),
            main_class, *args,
        ]  # fmt: skip

    def start(self, timeout_s: float = 90.0) -> ApacheKafka:
        for node_id in range(1, self.brokers + 1):
            node_dir = self.node_dir(node_id)
            node_dir.mkdir(parents=True, exist_ok=True)
            props_file = node_dir / "server.properties"
            props_file.write_text(
                "".join(f"{k}={v}\n" for k, v in self._properties(node_id).items())
            )
            fmt = self._java(
                "kafka.tools.StorageTool", "format", "-t", self.cluster_id,
                "-c", str(props_file), "--ignore-formatted", node_dir=node_dir,
            )  # fmt: skip
            if self.security is not None and node_id == 1:
                fmt += self.security.format_arguments()
            done = subprocess.run(fmt, capture_output=True, text=True, timeout=120)
            if done.returncode != 0:
                raise KafkaNotStarted(f"kafka-storage format failed: {done.stderr[-2000:]}")
            out = open(node_dir / "stdout.log", "ab")  # noqa: SIM115 (owned by the process)
            self._procs.append(
                subprocess.Popen(
                    self._java("kafka.Kafka", str(props_file), node_dir=node_dir),
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )  # fmt: skip
            )
        self.wait_ready(timeout_s)
        return self

    def kill(self, node_id: int) -> None:
        """SIGKILL one node (a crash: no controlled shutdown)."""
        proc = self._procs[node_id - 1]
        proc.kill()
        proc.wait()

    def restart(self, node_id: int) -> None:
        """Start a killed or stopped node again on its data dir and port."""
        node_dir = self.node_dir(node_id)
        out = open(node_dir / "stdout.log", "ab")  # noqa: SIM115 (owned by the process)
        self._procs[node_id - 1] = subprocess.Popen(
            self._java("kafka.Kafka", str(node_dir / "server.properties"), node_dir=node_dir),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def wait_ready(self, timeout_s: float = 90.0) -> None:
        """Ready when every broker answers Metadata listing all brokers (kafka-clients' view)."""
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout_s
        config = {"bootstrap.servers": self.bootstrap_servers}
        if self.security is not None:
            config = self.security.admin_client_config(self.bootstrap_servers)
        admin = AdminClient({**config, "broker.address.family": "v4", "log_level": 0})
        last: Exception | None = None
        while time.monotonic() < deadline:
            for node_id, proc in enumerate(self._procs, start=1):
                if proc.poll() is not None:
                    raise KafkaNotStarted(
                        f"Apache Kafka node {node_id} exited with {proc.returncode}:\n"
                        + self.log_tail(node_id)
                    )
            try:
                meta = admin.list_topics(timeout=2)
                if len(meta.brokers) == self.brokers:
                    return
            except Exception as exc:  # noqa: BLE001 (not up yet)
                last = exc
            time.sleep(0.3)
        self.stop()
        raise KafkaNotStarted(
            f"Apache Kafka not ready in {timeout_s}s ({last}):\n" + self.log_tail(1)
        )

    def log_tail(self, node_id: int = 1, lines: int = 40) -> str:
        text = ""
        for name in ("stdout.log", "server.log"):
            path = self.node_dir(node_id) / name
            if path.exists():
                text += "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) + "\n"
        return text

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM every node (brokers first, the controller last) and wait; SIGKILL stragglers."""
        for proc in reversed(self._procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=timeout_s)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        self._procs.clear()

    def __enter__(self) -> ApacheKafka:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def run_tool(
    main_class: str, *args: str, timeout_s: float = 120.0, heap: str = "512m", **kwargs
) -> subprocess.CompletedProcess:
    """Run one of Kafka's command-line tools by its main class (e.g. `kafka.tools.DumpLogSegments`
    or `org.apache.kafka.tools.TopicCommand`) with the pinned class path; output captured."""
    cmd = [
        "java", f"-Xmx{heap}", "-Djava.net.preferIPv4Stack=true",
        "-Dlog4j2.rootLogger.level=WARN", "-cp", kafka_classpath(), main_class, *args,
    ]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, **kwargs)


def _cluster_id() -> str:
    """A Kafka cluster id that `kafka-storage format -t` accepts (one starting with "-" failed
    about one start in 64)."""
    from sparklog.controller.cluster_id import new_cluster_id

    return new_cluster_id()


def _mb(heap: str) -> int:
    unit = heap[-1].lower()
    number = int(heap[:-1]) if unit in "gmk" else int(heap)
    return {"g": number * 1024, "m": number, "k": max(1, number // 1024)}.get(unit, number)


if __name__ == "__main__":  # manual use: python -m sparklog.oracle.kafka_server [brokers]
    import sys
    import tempfile

    with ApacheKafka(
        tempfile.mkdtemp(prefix="kafka-"), brokers=int(sys.argv[1:] and sys.argv[1] or 1)
    ) as kafka:
        print(f"bootstrap.servers={kafka.bootstrap_servers}", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
    os._exit(0)
