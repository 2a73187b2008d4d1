"""The pinned JARs sparklog is tested and benchmarked against (DESIGN D14), and where they live.

`make` runs `python -m sparklog.jars fetch`, which resolves the manifests under
`conf/jars/` with Maven into an ignored cache (`.jars/kafka`, `.jars/spark`, `.jars/s3proxy`)
once; everything after that runs offline from the cache:

- `kafka_classpath()` — Apache Kafka's broker, tools and Java clients, for `java -cp`;
- `spark_jars()` — Spark's Kafka connector and delta-spark, for `spark.jars` (no Ivy at run time);
- `s3proxy_jar()` — S3Proxy, the S3-compatible server tests keep the driver's state on.

Point elsewhere with `SPARKLOG_JARS_DIR` (a cache made by another checkout), `KAFKA_HOME` (an
Apache Kafka installation: its `libs/` is used) or `SPARKLOG_SPARK_JARS` (a comma-separated list
for `spark.jars`). Nothing here imports pyspark. Spark sessions (`spark/session.py`), the Kafka
oracle (`oracle/`) and the tests all use it, so it sits beside them, in neither.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
MANIFESTS = REPO_ROOT / "conf" / "jars"
GROUPS = ("kafka", "spark", "s3proxy")
_STAMP = ".fetched"


class JarsMissing(RuntimeError):
    """The JAR cache is absent: says which command fetches it."""


def jars_dir() -> Path:
    """The cache root (`SPARKLOG_JARS_DIR`, default `<repo>/.jars`)."""
    return Path(os.environ.get("SPARKLOG_JARS_DIR") or REPO_ROOT / ".jars")


def _group_dir(group: str) -> Path:
    folder = jars_dir() / group
    if not (folder / _STAMP).exists():
        raise JarsMissing(
            f"the pinned {group} JARs are not in {folder}: run `make jars` (needs mvn and Maven "
            f"Central), or set SPARKLOG_JARS_DIR to a folder that has them"
        )
    return folder


def kafka_libs() -> Path:
    """The folder of Apache Kafka's JARs (`$KAFKA_HOME/libs` when KAFKA_HOME is set)."""
    home = os.environ.get("KAFKA_HOME")
    if home:
        libs = Path(home) / "libs"
        if not libs.is_dir():
            raise JarsMissing(f"KAFKA_HOME={home} has no libs/ folder: point it at a Kafka install")
        return libs
    return _group_dir("kafka")


def kafka_classpath() -> str:
    """A `java -cp` class path with Apache Kafka's broker, tools, clients and log4j binding."""
    return os.pathsep.join(str(p) for p in sorted(kafka_libs().glob("*.jar")))


def kafka_version() -> str:
    """The Apache Kafka version on the class path (from the kafka-clients JAR's name)."""
    for jar in kafka_libs().glob("kafka-clients-*.jar"):
        return jar.stem.removeprefix("kafka-clients-")
    raise JarsMissing(f"no kafka-clients JAR in {kafka_libs()}")


def spark_jar_paths() -> list[Path]:
    """The JARs Spark sessions add: the Kafka connector (`format("kafka")`) and delta-spark."""
    override = os.environ.get("SPARKLOG_SPARK_JARS")
    if override:
        return [Path(p) for p in override.split(",") if p]
    return sorted(_group_dir("spark").glob("*.jar"))


def s3proxy_jar() -> Path:
    """S3Proxy's self-contained JAR (`java -cp JAR org.gaul.s3proxy.Main`)."""
    folder = _group_dir("s3proxy")
    for jar in folder.glob("s3proxy-*.jar"):
        return jar
    raise JarsMissing(f"no s3proxy JAR in {folder}: run `make jars`")


def spark_jars() -> str:
    """The value for `spark.jars`."""
    return ",".join(str(p) for p in spark_jar_paths())


def spark_jars_or_none() -> str | None:
    """`spark_jars()` when the cache exists, else None (sessions still work without the extras)."""
    try:
        return spark_jars()
    except JarsMissing:
        return None


# -- fetching (make jars) ---------------------------------------------------------------------


def _pyspark_jar_names() -> set[str]:
    """Artifact names of the JARs pyspark ships (so we do not add a second copy of any)."""
    import importlib.util

    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        return set()
    folder = Path(next(iter(spec.submodule_search_locations))) / "jars"
    return {_artifact(p.name) for p in folder.glob("*.jar")}


def _artifact(file_name: str) -> str:
    """`jackson-core-2.21.2.jar` -> `jackson-core` (the name before the first `-<digit>`)."""
    stem = file_name.removesuffix(".jar")
    parts = stem.split("-")
    for i, part in enumerate(parts):
        if i and part[:1].isdigit():
            return "-".join(parts[:i])
    return stem


def fetch(group: str) -> Path:
    """Resolve `conf/jars/<group>/pom.xml` into the cache with Maven; idempotent."""
    target = jars_dir() / group
    stamp = target / _STAMP
    pom = MANIFESTS / group / "pom.xml"
    if stamp.exists() and stamp.stat().st_mtime >= pom.stat().st_mtime:
        return target
    mvn = shutil.which("mvn")
    if mvn is None:
        raise SystemExit(
            "sparklog: `mvn` not found: install Maven (Debian: apt-get install maven) to fetch "
            "the pinned Kafka/Spark/Delta/S3Proxy JARs"
        )
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    cmd = [
        mvn, "-B", "-q", "-f", str(pom), "dependency:copy-dependencies",
        f"-DoutputDirectory={target}", "-DincludeScope=runtime",
    ]  # fmt: skip
    print(f"sparklog: fetching the pinned {group} JARs with Maven into {target}", flush=True)
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        errors = [line for line in done.stdout.splitlines() if "[ERROR]" in line]
        first = errors[0] if errors else done.stderr.strip()[-300:]
        raise SystemExit(
            f"sparklog: Maven could not fetch the {group} JARs (is Maven Central reachable?): "
            f"{first}"
        )
    if group == "spark":
        shipped = _pyspark_jar_names()
        for jar in target.glob("*.jar"):
            if _artifact(jar.name) in shipped:
                jar.unlink()
    stamp.touch()
    return target


def main(argv: list[str]) -> int:
    if argv[:1] != ["fetch"]:
        print(
            "usage: python -m sparklog.jars fetch [kafka|spark|s3proxy ...]",
            file=sys.stderr,
        )
        return 2
    for group in argv[1:] or GROUPS:
        folder = fetch(group)
        size_mb = sum(p.stat().st_size for p in folder.glob("*.jar")) / 1e6
        print(f"sparklog: {group} JARs ready in {folder} ({size_mb:.0f} MB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
