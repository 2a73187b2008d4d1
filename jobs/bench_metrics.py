"""What metrics cost (issue 31 §4): produce and consume throughput of a sparklog broker with
its metrics on vs off, interleaved, ratios from one run.

  on   `sparklog.metrics.enabled=true` (the measure stage: Kafka's RequestMetrics on every
       request; the data-path meters) and the Prometheus endpoint scraped every
       `--scrape-interval-s` by a thread of this process, as Prometheus would;
  off  `sparklog.metrics.enabled=false`, no endpoint.

Both clusters (`python -m sparklog serve --master none`, one broker each) run side by side;
the cells alternate on, off, on, off, ... for `--rounds` rounds, each a confluent-kafka
produce (1 KB values, 6 partitions, RF=1, acks=all, lz4: bench_vs_kafka's cell) into a new
topic, then a consume of it. The ratio of a cell is median(on) / median(off) (target >= 0.97);
beside each, the broker process's CPU seconds per GB, median(off) / median(on) (what the
metrics cost in CPU, which a machine shared with other work disturbs less than MB/s), read
from the scheduler's ns counts (`/proc/<pid>/task/*/schedstat`; the 10 ms ticks of
/proc/<pid>/stat are a tenth of a cell). Each ratio comes with its spread: the lowest and
highest of the per-round ratios (round i's on over round i's off), and the ratio of the best
rounds (load from elsewhere only ever slows a cell, so the best is the least disturbed).

    python jobs/bench_metrics.py [--mb 100] [--rounds 9] [--json out.json] [--quick]
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_vs_kafka import System, confluent_consume, confluent_produce, create_topic  # noqa: E402

PARTITIONS = 6
SIZE = 1000
DEFINITIONS = {
    "metrics_on_vs_off_produce": "confluent produce 1KB/6p/RF=1 acks=all, metrics on (scraped) / "
    "off: median of the interleaved rounds",
    "metrics_on_vs_off_consume": "confluent consume (assign) of that topic, metrics on / off",
    "metrics_on_vs_off_produce_cpu_efficiency": "broker CPU s per GB produced: off / on (1.0 = "
    "metrics cost no CPU; steadier than MB/s on a shared machine)",
    "metrics_on_vs_off_consume_cpu_efficiency": "broker CPU s per GB consumed: off / on",
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serve(name: str, settings: dict[str, str]) -> Iterator[System]:
    """A one-broker `sparklog serve --master none` with `settings`."""
    with tempfile.TemporaryDirectory(prefix=f"bench-metrics-{name}-") as d:
        cmd = [sys.executable, "-m", "sparklog", "serve", "--master", "none", "--brokers", "1",
               "--data-dir", d]  # fmt: skip
        for key, value in settings.items():
            cmd += ["--config", f"{key}={value}"]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert proc.stdout is not None
        bootstrap = None
        for line in proc.stdout:
            if line.startswith("bootstrap.servers="):
                bootstrap = line.strip().split("=", 1)[1]
                break
        if bootstrap is None:
            raise SystemExit(f"sparklog serve ({name}) did not start")
        threading.Thread(target=proc.stdout.read, daemon=True).start()
        try:
            yield System(name, bootstrap, [proc.pid])
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)


class Scraper:
    """Scrapes a `/metrics` endpoint every `interval_s` (what Prometheus adds to "on")."""

    def __init__(self, port: int, interval_s: float) -> None:
        self.url = f"http://127.0.0.1:{port}/metrics"
        self.interval_s = interval_s
        self.scrapes = 0
        self.bytes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-scraper", daemon=True)

    def __enter__(self) -> Scraper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            with urllib.request.urlopen(self.url, timeout=30) as response:
                self.bytes += len(response.read())
            self.scrapes += 1


def cpu_s(system: System) -> float:
    """CPU seconds the system's processes have run, to the ns: the sum over their live threads
    (the servers' threads live as long as they do)."""
    total = 0
    for pid in system.pids:
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                total += int((task / "schedstat").read_text().split()[0])
            except (FileNotFoundError, ProcessLookupError):  # a thread that just ended
                continue
    return total / 1e9


def _round(system: System, records: int) -> dict[str, float]:
    """One produce and one consume: MB/s of each, and the broker process's CPU seconds per
    GB of values during each (steadier than MB/s on a shared machine)."""
    gb = records * SIZE / 1e9
    topic = create_topic(system.bootstrap, PARTITIONS, 1)
    cpu = cpu_s(system)
    produced = confluent_produce(system.bootstrap, topic, records, SIZE)
    produce_cpu = cpu_s(system) - cpu
    cpu = cpu_s(system)
    consumed = confluent_consume(system.bootstrap, topic, PARTITIONS, records, SIZE)
    consume_cpu = cpu_s(system) - cpu
    return {
        "produce": produced["mb_s"],
        "consume": consumed["mb_s"],
        "produce_cpu_s_per_gb": produce_cpu / gb,
        "consume_cpu_s_per_gb": consume_cpu / gb,
    }


def _spread(numerators: list[float], denominators: list[float]) -> list[float]:
    """The lowest and highest per-round ratio (rounds paired as they were interleaved)."""
    ratios = [a / b for a, b in zip(numerators, denominators, strict=True)]
    return [round(min(ratios), 3), round(max(ratios), 3)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=100.0, help="MB of values per produce cell")
    parser.add_argument("--rounds", type=int, default=9, help="on/off pairs, interleaved")
    parser.add_argument("--scrape-interval-s", type=float, default=5.0, help="1 for the worst case")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, 2 rounds (smoke test)")
    parser.add_argument("--json", help="write every figure here")
    args = parser.parse_args()
    if args.quick:
        args.mb, args.rounds = 5.0, 2
    records = int(args.mb * 1e6 / SIZE)
    port = _free_port()
    on_settings = {"sparklog.metrics.enabled": "true", "metrics.prometheus.port": str(port)}
    off_settings = {"sparklog.metrics.enabled": "false", "metrics.prometheus.port": "0"}
    cells = ("produce", "consume", "produce_cpu_s_per_gb", "consume_cpu_s_per_gb")
    runs: dict[str, dict[str, list[float]]] = {s: {c: [] for c in cells} for s in ("on", "off")}
    with (
        serve("on", on_settings) as on,
        serve("off", off_settings) as off,
        Scraper(port, args.scrape_interval_s) as scraper,
    ):
        _round(on, max(1, records // 10))  # warm-up: imports, first segments, JIT-less caches
        _round(off, max(1, records // 10))
        for i in range(args.rounds):
            order = (("on", on), ("off", off)) if i % 2 == 0 else (("off", off), ("on", on))
            for name, system in order:
                figures = _round(system, records)
                for cell in cells:
                    runs[name][cell].append(figures[cell])
                print(f"round {i + 1} {name:>3}: produce {figures['produce']:7.1f} MB/s "
                      f"({figures['produce_cpu_s_per_gb']:5.1f} CPU s/GB), consume "
                      f"{figures['consume']:7.1f} MB/s ({figures['consume_cpu_s_per_gb']:5.1f} "
                      "CPU s/GB)", flush=True)  # fmt: skip
        # one scrape's CPU in the "on" process, measured alone: what the scraper adds to
        # whichever cell it lands in (lumpy), and on average per second at its interval
        before = cpu_s(on)
        for _ in range(5):
            with urllib.request.urlopen(scraper.url, timeout=30) as response:
                response.read()
        scrape_cpu_s = (cpu_s(on) - before) / 5
    out: dict[str, Any] = {"runs": runs, "scrapes": scraper.scrapes}
    out["scrape_bytes_avg"] = scraper.bytes / max(1, scraper.scrapes)
    out["scrape_cpu_ms"] = scrape_cpu_s * 1000
    out["scrape_cpu_share_of_a_core"] = scrape_cpu_s / args.scrape_interval_s
    for cell in ("produce", "consume"):
        on_mb_s = statistics.median(runs["on"][cell])
        off_mb_s = statistics.median(runs["off"][cell])
        out[f"metrics_on_{cell}_mb_s"] = on_mb_s
        out[f"metrics_off_{cell}_mb_s"] = off_mb_s
        out[f"metrics_on_vs_off_{cell}"] = on_mb_s / off_mb_s
        out[f"metrics_on_vs_off_{cell}_spread"] = _spread(runs["on"][cell], runs["off"][cell])
        # best of the rounds: the least disturbed cell of each (external load only slows)
        out[f"metrics_on_vs_off_{cell}_best"] = max(runs["on"][cell]) / max(runs["off"][cell])
        on_cpu = statistics.median(runs["on"][f"{cell}_cpu_s_per_gb"])
        off_cpu = statistics.median(runs["off"][f"{cell}_cpu_s_per_gb"])
        out[f"metrics_on_vs_off_{cell}_cpu_efficiency"] = off_cpu / on_cpu
        out[f"metrics_on_vs_off_{cell}_cpu_efficiency_best"] = min(
            runs["off"][f"{cell}_cpu_s_per_gb"]
        ) / min(runs["on"][f"{cell}_cpu_s_per_gb"])
        out[f"metrics_on_vs_off_{cell}_cpu_efficiency_spread"] = _spread(
            runs["off"][f"{cell}_cpu_s_per_gb"], runs["on"][f"{cell}_cpu_s_per_gb"]
        )
    out["definitions"] = DEFINITIONS
    for key, definition in DEFINITIONS.items():
        low, high = out[f"{key}_spread"]
        print(f"{key} = {out[key]:.3f} [rounds {low:.3f}..{high:.3f}, best/best "
              f"{out[key + '_best']:.3f}]  ({definition})")  # fmt: skip
    print(f"{scraper.scrapes} scrapes of {out['scrape_bytes_avg'] / 1024:.1f} KiB on average, "
          f"{out['scrape_cpu_ms']:.1f} ms CPU each ({out['scrape_cpu_share_of_a_core']:.2%} of "
          f"a core every {args.scrape_interval_s:g} s)")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
