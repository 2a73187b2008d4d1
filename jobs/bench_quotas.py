"""Client quotas' cost and isolation on one in-process sparklog broker (issue 31 §3-4):

  entities_1000   confluent-kafka produce and consume (1 KB records) with 1,000 quota
                  entities configured that the bench client does not match (users and client
                  ids of others, with producer/consumer byte rates and request percentages),
                  against none: rounds interleaved (ABBA), ratio of the medians (target >=
                  0.97), with the spread of the per-round ratios and the ratio of the best
                  rounds (`_best`: load from elsewhere only slows a cell). Beside MB/s, the broker
                  loop thread's CPU seconds per GB (`/proc/.../schedstat`, ns): the client
                  shares this process and this 2-core machine is shared, so wall-clock MB/s
                  of a cell lasting a tenth of a second moves by a quarter from round to
                  round while the CPU the broker spends per GB does not. Consume is given
                  whole (consumer start included) and from its first record on (`transfer`).
  neighbour_p99   an unthrottled producer paced at --paced-rate records/s: its p99 delivery
                  latency beside a flat-out producer held by a 1 MB/s client-id quota, over
                  its p99 alone (target <= 1.5; Kafka's quota_test checks this in spirit).

Quotas are set by replaying `ClientQuota` records into the broker's quota source (what the
controller's records do on every broker), so only the enforcement is measured.

  PYTHONPATH=$PWD .venv/bin/python jobs/bench_quotas.py [--records 200000] [--rounds 8]
      [--no-neighbour]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
import uuid
from typing import Any

from sparklog.cluster.embedded import EmbeddedCluster
from sparklog.metadata.quotas import ClientQuotaEntity, QuotasImage, quota_record

LIBRDKAFKA = {"broker.address.family": "v4"}
VALUE = b"v" * 1000


def thousand_entities() -> QuotasImage:
    image = QuotasImage()
    for i in range(1000):
        if i % 3 == 0:
            entity = ClientQuotaEntity.of({"user": f"user-{i}"})
        elif i % 3 == 1:
            entity = ClientQuotaEntity.of({"client-id": f"app-{i}"})
        else:
            entity = ClientQuotaEntity.of({"user": f"user-{i}", "client-id": f"app-{i}"})
        for key, value in (
            ("producer_byte_rate", 1_000_000.0),
            ("consumer_byte_rate", 2_000_000.0),
            ("request_percentage", 50.0),
        ):
            image.replay(quota_record(entity, key, value))
    return image


def create_topic(bootstrap: str) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"bq-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({**LIBRDKAFKA, "bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
    time.sleep(0.5)  # the broker's image has it
    return name


def delete_topic(bootstrap: str, name: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({**LIBRDKAFKA, "bootstrap.servers": bootstrap})
    admin.delete_topics([name])[name].result(30)


def thread_cpu_s(native_id: int) -> float:
    """CPU seconds a thread of this process has run (the scheduler's ns count: the 10 ms ticks
    of /proc/.../stat are a tenth of a cell's broker CPU)."""
    with open(f"/proc/{os.getpid()}/task/{native_id}/schedstat") as f:
        return int(f.read().split()[0]) / 1e9


def produce_mb_s(bootstrap: str, topic: str, records: int, client_id: str = "bench") -> float:
    from confluent_kafka import Producer

    producer = Producer(
        {**LIBRDKAFKA, "bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5}
    )
    start = time.perf_counter()
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, VALUE)
                break
            except BufferError:
                producer.poll(0.001)
    assert producer.flush(120) == 0
    return records * len(VALUE) / (time.perf_counter() - start) / 1e6


def consume_mb_s(bootstrap: str, topic: str, records: int) -> tuple[float, float]:
    """MB/s of the whole consume (consumer start included) and from its first record on."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            **LIBRDKAFKA,
            "bootstrap.servers": bootstrap,
            "client.id": "bench",
            "group.id": "bench-" + uuid.uuid4().hex[:6],
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = 0
    first = None
    start = time.perf_counter()
    while got < records:
        for message in consumer.consume(min(1000, records - got), 1.0):
            if message.error() is None:
                if first is None:
                    first = time.perf_counter()
                got += 1
    end = time.perf_counter()
    consumer.close()
    mb = got * len(VALUE) / 1e6
    return mb / (end - start), mb / max(end - (first or start), 1e-9)


def paced_p99_ms(bootstrap: str, topic: str, rate: int, seconds: float) -> float:
    from confluent_kafka import Producer

    latencies: list[float] = []

    def delivered(err: Any, msg: Any, sent: float) -> None:
        if err is None:
            latencies.append((time.perf_counter() - sent) * 1000)

    producer = Producer(
        {**LIBRDKAFKA, "bootstrap.servers": bootstrap, "client.id": "neighbour", "linger.ms": 0}
    )
    start = time.perf_counter()
    for i in range(int(rate * seconds)):
        due = start + i / rate
        while (now := time.perf_counter()) < due:
            producer.poll(min(0.001, due - now))
        sent = time.perf_counter()
        producer.produce(topic, VALUE, on_delivery=lambda e, m, s=sent: delivered(e, m, s))
        producer.poll(0)
    producer.flush(30)
    return statistics.quantiles(latencies, n=100)[98]


def flat_out(bootstrap: str, topic: str, stop: threading.Event) -> None:
    from confluent_kafka import Producer

    producer = Producer(
        {
            **LIBRDKAFKA,
            "bootstrap.servers": bootstrap,
            "client.id": "noisy",
            "queue.buffering.max.kbytes": 1024,
        }
    )
    while not stop.is_set():
        try:
            producer.produce(topic, VALUE)
        except BufferError:
            producer.poll(0.01)
    producer.purge()
    producer.flush(1)


def stage_cost_us(none: QuotasImage, thousand: QuotasImage) -> dict[str, float]:
    """The throttle stage's own cost per Produce request (on_request + on_response), with
    no quotas and with 1,000 entities the client does not match: CPU only, no I/O."""
    from sparklog.broker.quotas import BrokerQuotas, ThrottleStage
    from sparklog.metrics.registry import Metrics
    from sparklog.metrics.stats import MetricConfig
    from sparklog.protocol import codec, kio_build
    from sparklog.protocol.api_versions import ApiKey
    from sparklog.protocol.connection import Request, RequestContext

    body = kio_build.build(
        codec.request_schema(ApiKey.PRODUCE, 9),
        {
            "transactional_id": None,
            "acks": 1,
            "timeout": 1000,
            "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": VALUE}]}],
        },
    )
    out: dict[str, float] = {}
    runs = [("none", none), ("entities_1000", thousand)] * 3  # alternated, best of three
    for label, image in runs:
        metrics = Metrics()
        stage = ThrottleStage(
            BrokerQuotas(metrics, MetricConfig(11, 1000), lambda image=image: image), metrics
        )
        n = 100_000
        start = time.perf_counter()
        for _ in range(n):
            request = Request(0, 9, 1, "bench", body, 1100, RequestContext())
            stage.on_request(request)
            stage.on_response(request, None)
        cost = round((time.perf_counter() - start) / n * 1e6, 2)
        out[label] = min(out.get(label, cost), cost)
    return out


def _spread(values: list[float]) -> list[float]:
    return [round(min(values), 3), round(max(values), 3)]


def entities_cells(broker: Any, bootstrap: str, records: int, rounds: int) -> dict[str, Any]:
    """Produce then consume a new topic per cell, no quotas vs 1,000 entities, ABBA rounds:
    MB/s and the broker loop thread's CPU s/GB of each, ratios of the medians + spread."""
    none, thousand = QuotasImage(), thousand_entities()
    loop_thread = next(t for t in threading.enumerate() if t.name == broker.thread_name)
    assert loop_thread.native_id is not None
    gb = records * len(VALUE) / 1e9
    figures = ("produce", "consume", "consume_transfer", "produce_cpu_s_gb", "consume_cpu_s_gb")
    cells: dict[str, dict[str, list[float]]] = {
        label: {f: [] for f in figures} for label in ("none", "entities_1000")
    }
    for round_ in range(rounds):
        order = [("none", none), ("entities_1000", thousand)]
        for label, image in order if round_ % 2 == 0 else order[::-1]:  # ABBA
            broker.quotas.source = lambda image=image: image
            topic = create_topic(bootstrap)
            cell = cells[label]
            cpu = thread_cpu_s(loop_thread.native_id)
            cell["produce"].append(produce_mb_s(bootstrap, topic, records))
            produced_cpu = thread_cpu_s(loop_thread.native_id)
            whole, transfer = consume_mb_s(bootstrap, topic, records)
            consumed_cpu = thread_cpu_s(loop_thread.native_id)
            cell["consume"].append(whole)
            cell["consume_transfer"].append(transfer)
            cell["produce_cpu_s_gb"].append((produced_cpu - cpu) / gb)
            cell["consume_cpu_s_gb"].append((consumed_cpu - produced_cpu) / gb)
            delete_topic(bootstrap, topic)  # the cells' data need not pile up
    out: dict[str, Any] = {}
    on, off = cells["entities_1000"], cells["none"]
    for what in ("produce", "consume", "consume_transfer"):
        out[f"entities_1000_vs_none_{what}"] = round(
            statistics.median(on[what]) / statistics.median(off[what]), 3
        )
        out[f"entities_1000_vs_none_{what}_round_ratios"] = _spread(
            [a / b for a, b in zip(on[what], off[what], strict=True)]
        )
        # best of the rounds: the least disturbed cell of each (external load only slows)
        out[f"entities_1000_vs_none_{what}_best"] = round(max(on[what]) / max(off[what]), 3)
        out[f"{what}_mb_s_none"] = round(statistics.median(off[what]), 1)
        out[f"{what}_mb_s_entities_1000"] = round(statistics.median(on[what]), 1)
    for what in ("produce", "consume"):
        key = f"{what}_cpu_s_gb"
        # CPU efficiency: none's CPU per GB over the entities' (1.0 = the quotas cost nothing)
        out[f"entities_1000_vs_none_{what}_cpu_efficiency"] = round(
            statistics.median(off[key]) / statistics.median(on[key]), 3
        )
        out[f"entities_1000_vs_none_{what}_cpu_efficiency_round_ratios"] = _spread(
            [b / a for a, b in zip(on[key], off[key], strict=True)]
        )
        out[f"entities_1000_vs_none_{what}_cpu_efficiency_best"] = round(
            min(off[key]) / min(on[key]), 3
        )
        out[f"broker_{key}_none"] = round(statistics.median(off[key]), 3)
        out[f"broker_{key}_entities_1000"] = round(statistics.median(on[key]), 3)
    out["samples"] = {
        label: {f: [round(v, 3) for v in values] for f, values in cell.items()}
        for label, cell in cells.items()
    }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--paced-rate", type=int, default=500)
    parser.add_argument("--paced-seconds", type=float, default=5.0)
    parser.add_argument("--no-neighbour", action="store_true", help="only the 1,000-entity cells")
    args = parser.parse_args()
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp, EmbeddedCluster(brokers=1, data_dir=tmp) as cluster:
        broker = cluster.brokers[0]
        bootstrap = cluster.bootstrap_servers
        # warm-up cell (first segments, connections, caches), not counted
        warm = create_topic(bootstrap)
        produce_mb_s(bootstrap, warm, max(1, args.records // 10))
        consume_mb_s(bootstrap, warm, max(1, args.records // 10))
        out.update(entities_cells(broker, bootstrap, args.records, args.rounds))
        out["stage_us_per_request"] = stage_cost_us(QuotasImage(), thousand_entities())
        if args.no_neighbour:
            print(json.dumps(out, indent=2))
            return
        # neighbour isolation
        held = QuotasImage()
        held.replay(
            quota_record(ClientQuotaEntity.of({"client-id": "noisy"}), "producer_byte_rate", 1e6)
        )
        broker.quotas.source = lambda: held
        quiet, loud = create_topic(bootstrap), create_topic(bootstrap)
        alone = paced_p99_ms(bootstrap, quiet, args.paced_rate, args.paced_seconds)
        stop = threading.Event()
        noisy = threading.Thread(target=flat_out, args=(bootstrap, loud, stop))
        noisy.start()
        try:
            time.sleep(1.0)  # past its 10 s burst allowance (10 MB) at loopback speed
            beside = paced_p99_ms(bootstrap, quiet, args.paced_rate, args.paced_seconds)
        finally:
            stop.set()
            noisy.join()
        out["neighbour_p99_ms_alone"] = round(alone, 2)
        out["neighbour_p99_ms_beside_throttled"] = round(beside, 2)
        out["neighbour_p99_ratio"] = round(beside / alone, 2)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
