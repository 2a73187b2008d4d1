"""Connection load: does a broker keep serving producers while thousands of connections sit
idle and hundreds dribble a huge frame a byte at a time, and does its memory come back?

    python jobs/bench_connections.py --idle 3000 --slow 200 --producers 200 --seconds 15

One broker runs in its own process (`python -m sparklog serve --master none`). Each phase
runs `--producers` concurrent producers (one connection each, acks=1, one 1 KB record per
Produce request, back to back) for `--seconds`:

  baseline   producers alone;
  loaded     the same, while `--idle` connections are open and silent and `--slow` connections
             each declare a 50 MB request and send one byte a second (slow-loris).

Reported: acks/s of each phase and their ratio (`loaded_vs_baseline`), produce errors, broker
RSS at start, at the peak of the loaded phase and 5 s after every connection closed
(`rss_after_vs_before`). `--json FILE` writes the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import resource
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sparklog.client import AdminClient, NewTopic  # noqa: E402
from sparklog.protocol import codec, kio_build  # noqa: E402
from sparklog.protocol.api_versions import ApiKey  # noqa: E402
from sparklog.records import SimpleRecord, build_batch  # noqa: E402

TOPIC = "load"


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def produce_frame(correlation_id: int, partition: int) -> bytes:
    batch = build_batch([SimpleRecord(b"x" * 1000, None, int(time.time() * 1000))])
    body = kio_build.build(
        codec.request_schema(ApiKey.PRODUCE, 7),
        {
            "transactional_id": None,
            "acks": 1,
            "timeout": 10_000,
            "topic_data": [
                {"name": TOPIC, "partition_data": [{"index": partition, "records": batch}]}
            ],
        },
    )
    return codec.encode_request(body, correlation_id, "bench-connections")


async def read_frame(reader: asyncio.StreamReader) -> bytes:
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    return await reader.readexactly(size)


async def producer(host: str, port: int, n: int, until: float, stats: dict[str, int]) -> None:
    try:
        reader, writer = await asyncio.open_connection(host, port)
    except OSError:
        stats["connect_errors"] += 1
        return
    frame = produce_frame(n, n % 6)
    try:
        while time.monotonic() < until:
            writer.write(frame)
            response = await read_frame(reader)
            decoded = codec.decode_response(response, ApiKey.PRODUCE, 7)[1]
            code = int(decoded.responses[0].partition_responses[0].error_code)
            stats["acks" if code == 0 else "errors"] += 1
    except (OSError, asyncio.IncompleteReadError):
        stats["errors"] += 1
    finally:
        writer.close()


async def produce_phase(host: str, port: int, producers: int, seconds: float) -> dict[str, Any]:
    stats = {"acks": 0, "errors": 0, "connect_errors": 0}
    started = time.monotonic()
    until = started + seconds
    await asyncio.gather(*(producer(host, port, n, until, stats) for n in range(producers)))
    elapsed = time.monotonic() - started
    return {**stats, "acks_per_s": round(stats["acks"] / elapsed)}


async def hold(host: str, port: int, idle: int, slow: int, stop: asyncio.Event) -> dict[str, int]:
    """Open `idle` silent and `slow` slow-loris connections; keep them until `stop`."""
    writers: list[asyncio.StreamWriter] = []
    failed = 0
    for _ in range(idle + slow):
        try:
            _reader, writer = await asyncio.open_connection(host, port)
            writers.append(writer)
        except OSError:
            failed += 1
    slow_writers = writers[idle:]
    for w in slow_writers:
        w.write(struct.pack(">i", 50 * 1024 * 1024))
    while not stop.is_set():
        for w in slow_writers:
            if not w.is_closing():
                w.write(b"\0")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 1.0)
    closed_by_broker = sum(1 for w in writers if w.transport.is_closing())
    for w in writers:
        w.close()
    return {"opened": len(writers), "refused": failed, "closed_by_broker": closed_by_broker}


async def run(args: argparse.Namespace, host: str, port: int, pid: int) -> dict[str, Any]:
    out: dict[str, Any] = {"rss_mb_start": round(rss_mb(pid), 1)}
    out["baseline"] = await produce_phase(host, port, args.producers, args.seconds)
    stop = asyncio.Event()
    holder = asyncio.create_task(hold(host, port, args.idle, args.slow, stop))
    await asyncio.sleep(2)  # the connections are open before the producers start
    peak = [rss_mb(pid)]

    async def sample() -> None:
        while not stop.is_set():
            peak.append(rss_mb(pid))
            await asyncio.sleep(0.5)

    sampler = asyncio.create_task(sample())
    out["loaded"] = await produce_phase(host, port, args.producers, args.seconds)
    stop.set()
    out["held"] = await holder
    await sampler
    await asyncio.sleep(5)
    out["rss_mb_peak"] = round(max(peak), 1)
    out["rss_mb_after"] = round(rss_mb(pid), 1)
    out["loaded_vs_baseline"] = round(
        out["loaded"]["acks_per_s"] / max(1, out["baseline"]["acks_per_s"]), 3
    )
    out["rss_after_vs_before"] = round(out["rss_mb_after"] / out["rss_mb_start"], 3)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--idle", type=int, default=3000)
    parser.add_argument("--slow", type=int, default=200)
    parser.add_argument("--producers", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    wanted = args.idle + args.slow + args.producers + 500
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(max(soft, wanted), hard), hard))

    data_dir = tempfile.mkdtemp(prefix="sparklog-bench-connections-")
    broker = subprocess.Popen(
        [sys.executable, "-m", "sparklog", "serve", "--master", "none", "--data-dir", data_dir,
         "--config", "num.partitions=6", "--config", "log.retention.bytes=104857600"],
        stdout=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip
    try:
        assert broker.stdout is not None
        line = broker.stdout.readline().strip()
        if not line.startswith("bootstrap.servers="):
            raise RuntimeError(f"the broker did not start: {line!r}")
        bootstrap = line.split("=", 1)[1]
        with AdminClient({"bootstrap.servers": bootstrap}) as admin:
            admin.create_topics([NewTopic(TOPIC, 6, 1)])
        host, port = bootstrap.split(",")[0].rsplit(":", 1)
        report = asyncio.run(run(args, host, int(port), broker.pid))
    finally:
        broker.terminate()
        broker.wait(30)
    report["settings"] = vars(args) | {"json": None}
    text = json.dumps(report, indent=2, sort_keys=True, default=str)
    print(text)
    if args.json is not None:
        args.json.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
