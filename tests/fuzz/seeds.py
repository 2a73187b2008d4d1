"""Writes the seed corpus (valid inputs of every shape the targets read) into
`tests/fuzz/corpus/<target>/seed-*`: `python -m tests.fuzz.seeds`. The files are committed;
crash inputs the fuzzer finds land beside them and stay as regression cases."""

from __future__ import annotations

import hashlib
import uuid
from pathlib import Path

from sparklog.protocol import codec, kio_build
from sparklog.protocol.api_versions import BROKER_APIS, GROUP_COORDINATOR_SERVED_APIS, ApiKey
from sparklog.records import SimpleRecord, build_batch
from sparklog.records.compression import CompressionType
from sparklog.records.control import (
    ControlRecordType,
    EndTransactionMarker,
    build_end_txn_marker_batch,
)

from .examples import example_frames, example_response_frames

CORPUS = Path(__file__).parent / "corpus"


def batches() -> list[bytes]:
    records = [
        SimpleRecord(b"value-%d" % i, key=b"k%d" % i, timestamp=1_700_000_000_000 + i,
                     headers=(("h", b"v"),) if i % 2 else ())
        for i in range(5)
    ]  # fmt: skip
    out = [build_batch(records, compression=c) for c in CompressionType]
    out.append(build_batch(records, producer_id=7, producer_epoch=0, base_sequence=0))  # idempotent
    out.append(
        build_end_txn_marker_batch(
            EndTransactionMarker(ControlRecordType.COMMIT, 0),
            producer_id=7,
            producer_epoch=0,
            timestamp_ms=1_700_000_000_000,
        )
    )
    return out


def request_frames() -> list[bytes]:
    def frame(api: ApiKey, version: int, fields: dict) -> bytes:
        body = kio_build.build(codec.request_schema(api, version), fields)
        return codec.encode_request(body, 1, "fuzz")[4:]

    produce = {
        "transactional_id": None,
        "acks": -1,
        "timeout": 1000,
        "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": batches()[0]}]}],
    }
    metadata = {
        "topics": [{"name": "t", "topic_id": uuid.UUID(int=0)}],
        "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False,
    }
    every_api = [
        f[4:]
        for apis in (BROKER_APIS, GROUP_COORDINATOR_SERVED_APIS)
        for _api, _version, f in example_frames(apis, "t")
    ]
    return every_api + [
        frame(ApiKey.PRODUCE, 9, produce),
        frame(ApiKey.PRODUCE, 3, produce),
        frame(ApiKey.METADATA, 12, metadata),
        frame(ApiKey.API_VERSIONS, 3, {"client_software_name": "f", "client_software_version": "1"}),
        frame(ApiKey.END_TXN, 3, {"transactional_id": "t", "producer_id": 1, "producer_epoch": 0,
                                 "committed": True}),
    ]  # fmt: skip


def response_frames() -> list[bytes]:
    """api key + version (2 bytes each) + a response frame with correlation id 0."""
    out = []
    for apis in (BROKER_APIS, GROUP_COORDINATOR_SERVED_APIS):
        for api, version, frame in example_response_frames(apis, "t"):
            body = bytearray(frame[4:])
            body[0:4] = b"\0\0\0\0"  # the in-flight request's correlation id
            low = apis[api][0]
            out.append(int(api).to_bytes(2, "big") + (version - low).to_bytes(2, "big") + body)
    return out


def lz4_frames() -> bytes:
    """An LZ4 frame with block and content checksums and a content size (what liblz4 can
    write; Kafka's writer sets none of them)."""
    import lz4.frame

    data = b"".join(batches())
    return lz4.frame.compress(
        data, block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=False,
        content_checksum=True, block_checksum=True, store_size=True,
    )  # fmt: skip


def sasl_frames() -> list[bytes]:
    """Whole SASL conversations as a client writes them: handshake v1 + SaslAuthenticate, and
    handshake v0 + a raw token."""

    def frame(api: ApiKey, version: int, fields: dict) -> bytes:
        return codec.encode_request(
            kio_build.build(codec.request_schema(api, version), fields), 1, "f"
        )

    def raw(token: bytes) -> bytes:
        return len(token).to_bytes(4, "big") + token

    versions = frame(
        ApiKey.API_VERSIONS, 3, {"client_software_name": "f", "client_software_version": "1"}
    )
    plain = b"\x00alice\x00alice-pw"
    metadata = frame(
        ApiKey.METADATA,
        12,
        {
            "topics": None,
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
        },
    )
    return [
        versions + frame(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
        + frame(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": plain}) + metadata
        + frame(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
        + frame(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": plain}),
        frame(ApiKey.SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"}) + raw(plain) + metadata,
        frame(ApiKey.SASL_HANDSHAKE, 0, {"mechanism": "SCRAM-SHA-256"}) + raw(b"n,,n=alice,r=abcdef"),
        frame(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-512"})
        + frame(ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": b"n,,n=alice,r=abcdef"})
        + frame(ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": b"c=biws,r=abcdef,p=AAAA"}),
        frame(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "GSSAPI"}),
        metadata,
    ]  # fmt: skip


def sasl_token_seeds() -> list[bytes]:
    """A mechanism byte (0 PLAIN, 1 SCRAM-SHA-256, 2 SCRAM-SHA-512, 3 OAUTHBEARER) and the
    client's messages, NUL NUL between them; the SCRAM ones a real exchange with scramp."""
    import base64
    import json

    import scramp

    out = [b"\x00\x00alice\x00alice-pw", b"\x00alice\x00alice\x00alice-pw"]
    for index, name in ((1, "SCRAM-SHA-256"), (2, "SCRAM-SHA-512")):
        client = scramp.ScramClient([name], "alice", "alice-pw", c_nonce="fuzznonce")
        first = client.get_client_first().encode()
        out.append(bytes([index]) + first + b"\x00\x00c=biws,r=fuzznonce,p=AAAA")
        out.append(bytes([index]) + b"n,,n=a=2Cb,r=x,ext=1")

    def b64(obj: object) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()

    token = f"{b64({'alg': 'none'})}.{b64({'sub': 'alice', 'exp': 1_900_000_000})}."
    out.append(b"\x03" + f"n,,\x01auth=Bearer {token}\x01k=v\x01\x01".encode() + b"\x00\x00\x01")
    return out


def main() -> None:
    seeds = {
        "sasl_handshake": sasl_frames(),
        "sasl_tokens": sasl_token_seeds(),
        "request_frame": request_frames(),
        "response_frame": response_frames(),
        "produce_records": batches(),
        "segment_recovery": [b"".join(batches()[:3]), batches()[1] + batches()[2][:-7]],
        "native_decode": [*batches(), b"".join(batches()), lz4_frames()],
    }
    for target, inputs in seeds.items():
        directory = CORPUS / target
        directory.mkdir(parents=True, exist_ok=True)
        for data in inputs:
            name = "seed-" + hashlib.sha1(data).hexdigest()[:16]  # noqa: S324 - a file name
            (directory / name).write_bytes(data)


if __name__ == "__main__":
    main()
