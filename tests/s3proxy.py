"""A real S3-compatible server for tests: S3Proxy (the pinned JAR, `make jars`) with its
`filesystem` backend over a temp dir, on 127.0.0.1 (one per test session: the `s3proxy` fixture, which a conftest imports).

A bucket is a directory under the base dir, so `create_bucket` makes one without a client.
`settings(...)` are the sparklog settings (`storage.options.*`) that reach it.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from sparklog.jars import JarsMissing, s3proxy_jar

ACCESS_KEY = "sparklog-test"
SECRET_KEY = "sparklog-test-secret"
_START_TIMEOUT_S = 60.0


def java_available() -> bool:
    return shutil.which("java") is not None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class S3Proxy:
    """`start()` runs the server and returns once it accepts connections; `stop()` ends it."""

    def __init__(self, base_dir: Path) -> None:
        self.base_dir = base_dir
        self.data_dir = base_dir / "data"
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def storage_options(self) -> dict[str, str]:
        """delta-rs / object_store options for this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": "us-east-1",
            "AWS_ALLOW_HTTP": "true",
        }

    def settings(self) -> dict[str, str]:
        """The same as sparklog settings."""
        return {f"storage.options.{k}": v for k, v in self.storage_options().items()}

    def create_bucket(self, name: str) -> str:
        (self.data_dir / name).mkdir(parents=True, exist_ok=True)
        return name

    def start(self) -> S3Proxy:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        for _attempt in range(3):  # a free port can be taken between probe and bind
            self.port = _free_port()
            conf = self.base_dir / "s3proxy.conf"
            conf.write_text(
                f"s3proxy.endpoint={self.endpoint}\n"
                "s3proxy.authorization=aws-v2-or-v4\n"
                f"s3proxy.identity={ACCESS_KEY}\n"
                f"s3proxy.credential={SECRET_KEY}\n"
                "jclouds.provider=filesystem\n"
                f"jclouds.filesystem.basedir={self.data_dir}\n"
            )
            out = (self.base_dir / "s3proxy.log").open("ab")
            self._proc = subprocess.Popen(
                ["java", "-Xmx256m", "-cp", str(s3proxy_jar()), "org.gaul.s3proxy.Main"]
                + ["--properties", str(conf)],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
            out.close()
            if self._wait_listening():
                return self
            self.stop()
        raise RuntimeError(f"S3Proxy did not start; see {self.base_dir / 's3proxy.log'}")

    def _wait_listening(self) -> bool:
        assert self._proc is not None
        deadline = time.monotonic() + _START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                return False
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return True
            except OSError:
                time.sleep(0.1)
        return False

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def __enter__(self) -> S3Proxy:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


@pytest.fixture(scope="session")
def s3proxy(tmp_path_factory):
    """A real S3-compatible server (S3Proxy, filesystem backend) on 127.0.0.1 for the session."""
    if not java_available():
        pytest.skip("java is not installed: S3Proxy needs a JDK >= 17")
    try:
        s3proxy_jar()
    except JarsMissing as e:
        pytest.fail(str(e))
    with S3Proxy(tmp_path_factory.mktemp("s3proxy")) as server:
        yield server
