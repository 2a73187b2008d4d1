"""Fuzz targets: the decoders that see untrusted bytes, each a function of one input.

A target returns normally or raises one of the errors it is allowed to raise for bad input
(Kafka's: CORRUPT_MESSAGE, INVALID_RECORD, ...); anything else is a crash - a bug a hostile
or broken peer could trigger. `tests/fuzz/run.py` drives them with atheris; `test_fuzz.py`
replays the corpus in `tests/fuzz/corpus/<target>/` and fuzzes each for a bounded time.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from sparklog.errors import KafkaError
from sparklog.protocol.api_versions import BROKER_APIS, GROUP_COORDINATOR_SERVED_APIS
from sparklog.protocol.connection import ProtocolError, ServerConnection

NOW_MS = 1_700_000_000_000


def request_frame(data: bytes) -> None:
    """A request frame as a broker and the coordinator read it: a request or ProtocolError."""
    for apis in (BROKER_APIS, GROUP_COORDINATOR_SERVED_APIS):
        conn = ServerConnection(apis)
        conn.receive_data(len(data).to_bytes(4, "big") + data)
        with contextlib.suppress(ProtocolError):
            conn.next_request()


def response_frame(data: bytes) -> None:
    """A response as sparklog's clients read it: api key and version in the first 4 bytes
    pick the request in flight, the rest is the frame; a response or ProtocolError."""
    from sparklog.protocol.api_versions import ApiKey
    from sparklog.protocol.connection import ClientConnection

    if len(data) < 4:
        return
    api, version = int.from_bytes(data[:2], "big"), int.from_bytes(data[2:4], "big")
    low_high = BROKER_APIS.get(api) or GROUP_COORDINATOR_SERVED_APIS.get(api)
    if low_high is None:
        return
    version = low_high[0] + version % (low_high[1] - low_high[0] + 1)
    conn = ClientConnection()
    conn._in_flight.append(_in_flight(ApiKey(api), version))
    frame = data[4:]
    conn.receive_data(len(frame).to_bytes(4, "big") + frame)
    with contextlib.suppress(ProtocolError):
        conn.next_response()


def _in_flight(api, version: int):
    from sparklog.protocol.connection import _InFlight

    return _InFlight(0, int(api), version, True)


class _Logs:
    """One partition log per process, reused across inputs (appends that pass stay)."""

    log = None
    directory: Path | None = None

    @classmethod
    def get(cls):
        from sparklog.storage.log import Log

        if cls.log is None:
            cls.directory = Path(tempfile.mkdtemp(prefix="sparklog-fuzz-"))
            cls.log = Log.open(cls.directory / "fuzz-0", now_ms=0)
        return cls.log


def produce_records(data: bytes) -> None:
    """Produce payload bytes appended as a leader does: appended, or a Kafka error."""
    from sparklog.storage.producer_append_info import AppendOrigin

    log = _Logs.get()
    with contextlib.suppress(KafkaError):
        log.append_as_leader(data, 0, NOW_MS, origin=AppendOrigin.CLIENT)


def segment_recovery(data: bytes) -> None:
    """Arbitrary bytes as a partition's only segment after an unclean stop: the log opens
    (the bad tail truncated) and reads back; nothing may raise."""
    from sparklog.storage.log import Log

    directory = Path(tempfile.mkdtemp(prefix="sparklog-fuzz-seg-")) / "fuzz-0"
    directory.mkdir()
    try:
        (directory / f"{0:020d}.log").write_bytes(data)
        log = Log.open(directory, now_ms=0)
        try:
            end = log.log_end_offset
            if end > 0:
                log.read(0, 1 << 20)
        finally:
            log.close()
    finally:
        shutil.rmtree(directory.parent, ignore_errors=True)


def native_decode(data: bytes) -> None:
    """Fetched bytes decoded by the native core and by the reference codec: both must give the
    same records or raise the same error; the native LZ4 reader must agree with liblz4 on every
    frame it accepts. Skipped (returns) where the native core is not built."""
    from sparklog.records import native
    from sparklog.records.arrow_decode import read_batches
    from sparklog.records.compression import CompressionType, decompress
    from sparklog.records.errors import CorruptRecordError, DecompressedTooLargeError

    core = native.set_enabled(True)
    if core is None:
        return
    results = []
    for enabled in (True, False):
        native.set_enabled(enabled)
        try:
            got = read_batches(data, include_headers=True, skip_control=False, check_crcs=False)
            results.append((got.records, got.next_offset, got.valid_bytes))
        except (CorruptRecordError, DecompressedTooLargeError) as e:
            # a section past the readers' bound (a zstd frame declaring > 2 GiB, the first
            # input the fuzzer found after decompression was bounded) is refused as such
            results.append(("error", type(e).__name__, e.position, e.reason))
    native.set_enabled(True)
    fast, reference = results
    same = fast[0] == "error" if reference[0] == "error" else fast[0] != "error"
    if not same or (fast[0] == "error" and fast != reference):
        raise AssertionError(f"native {fast!r} != reference {reference!r}")
    if fast[0] != "error" and not (fast[0].equals(reference[0]) and fast[1:] == reference[1:]):
        raise AssertionError("native and reference decode different records")
    framed = core.lz4_frame_decompress(data)
    if framed is not None and bytes(framed) != decompress(CompressionType.LZ4, data):
        raise AssertionError("the native LZ4 reader disagrees with liblz4")


def _sasl_mechanisms():  # built once: scramp's credential maker runs 4096 iterations
    global _SASL_MECHANISMS
    if _SASL_MECHANISMS is None:
        from sparklog.security.credentials import ScramMechanism
        from sparklog.security.sasl.enabled import SaslMechanisms
        from sparklog.security.sasl.oauthbearer import UnsecuredJwsValidator
        from sparklog.security.sasl.plain import PlainUsers
        from sparklog.security.sasl.scram import InMemoryCredentialStore

        store = InMemoryCredentialStore()
        for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):
            store.add_password(mechanism, "alice", "alice-pw")
        _SASL_MECHANISMS = SaslMechanisms(
            ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"),
            plain_users=PlainUsers({"alice": "alice-pw"}),
            credentials=store,
            token_validator=UnsecuredJwsValidator(),
        )
    return _SASL_MECHANISMS


_SASL_MECHANISMS = None


def sasl_handshake(data: bytes) -> None:
    """Bytes on a SASL_PLAINTEXT connection before and during authentication: frames (requests,
    or raw tokens after SaslHandshake v0) through Kafka's authenticator state machine; replies
    must encode, and the only error is ProtocolError (the connection closes)."""
    from sparklog.protocol.connection import NEED_DATA
    from sparklog.protocol.sasl_authenticator import SaslServerAuthenticator, sasl_reply
    from sparklog.security.sasl.enabled import SaslServerConfig
    from sparklog.security.session import SecurityProtocol

    authenticator = SaslServerAuthenticator(
        SaslServerConfig(
            _sasl_mechanisms(), max_receive_size=65536, connections_max_reauth_ms=1000
        ),
        NOW_MS,
    )
    conn = ServerConnection(
        BROKER_APIS, security_protocol=SecurityProtocol.SASL_PLAINTEXT, sasl=authenticator
    )
    conn.receive_data(data)
    now_ms = NOW_MS
    with contextlib.suppress(ProtocolError):
        while (request := conn.next_request()) is not NEED_DATA:
            now_ms += 400  # sessions expire along the way
            reply = sasl_reply(conn, request, now_ms)
            if reply is None:
                continue
            if reply.body is not None:
                conn.send_response(request, reply.body)
            if reply.close:
                return


def sasl_tokens(data: bytes) -> None:
    """Client messages of one SASL exchange (the first byte picks PLAIN, SCRAM-SHA-256/512 or
    OAUTHBEARER; messages are separated by NUL NUL): the mechanisms raise only their two
    failure kinds."""
    from sparklog.security.sasl.mechanism import SaslAuthenticationFailedError, SaslError

    if not data:
        return
    mechanisms = _sasl_mechanisms()
    server = mechanisms.create(mechanisms.enabled[data[0] % len(mechanisms.enabled)])
    with contextlib.suppress(SaslError, SaslAuthenticationFailedError):
        for message in data[1:].split(b"\x00\x00")[:4]:
            server.evaluate_response(message, NOW_MS)
            if server.is_complete:
                assert server.authorization_id == "alice"
                return


TARGETS: dict[str, Callable[[bytes], None]] = {
    "sasl_handshake": sasl_handshake,
    "sasl_tokens": sasl_tokens,
    "request_frame": request_frame,
    "response_frame": response_frame,
    "produce_records": produce_records,
    "segment_recovery": segment_recovery,
    "native_decode": native_decode,
}
