"""The audit contract's building blocks (`sparklog.security.audit`): the bounded buffer every
server's sink is made of, and the events servers build for authentication failures and
security-metadata changes."""

from __future__ import annotations

import threading

import pytest

from sparklog.security.audit import (
    LOG_ONLY,
    AuditConfig,
    BufferedAuditSink,
    SwitchableAuditSink,
    authentication_failed,
    change_event,
)
from sparklog.security.session import KafkaPrincipal, SecurityProtocol, Session
from sparklog.settings import ConfigError


def test_an_empty_sink_is_still_the_sink_callers_pick():
    """`context.audit or LOG_ONLY` must not fall back to the log because nothing is buffered
    yet (a `__len__` made an empty sink falsy, and the first denial went to the log only)."""
    sink = BufferedAuditSink(10)
    assert (sink or LOG_ONLY) is sink


def test_a_full_buffer_drops_and_counts_and_reports_the_count_once():
    woken = []
    sink = BufferedAuditSink(3, wake=lambda: woken.append(1))
    events = [authentication_failed(i, client_address="h", listener="L", mechanism="PLAIN",
                                    reason="bad") for i in range(5)]  # fmt: skip
    for e in events:
        sink.record(e)
    assert (sink.buffered, sink.recorded, sink.dropped, len(woken)) == (3, 3, 2, 1)
    sink.add_dropped(7)  # what a broker reports it lost
    assert sink.take_dropped() == 9 and sink.take_dropped() == 0
    assert sink.drain(2) == events[:2] and sink.drain(10) == events[2:3]


def test_record_never_raises_even_when_waking_the_writer_fails():
    def broken_wake() -> None:
        raise RuntimeError("loop closed")

    sink = BufferedAuditSink(3, wake=broken_wake)
    sink.record(authentication_failed(1, client_address="h", listener="L", mechanism="",
                                      reason="r"))  # fmt: skip
    assert sink.buffered == 1


def test_record_from_many_threads_keeps_the_bound():
    sink = BufferedAuditSink(1_000)
    event = authentication_failed(1, client_address="h", listener="L", mechanism="", reason="r")

    def hammer() -> None:
        for _ in range(1_000):
            sink.record(event)

    threads = [threading.Thread(target=hammer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert (sink.buffered, sink.recorded, sink.dropped) == (1_000, 1_000, 3_000)


def test_the_events_servers_build():
    failed = authentication_failed(
        5, client_address="10.1.2.3", listener="SASL_SSL", mechanism="SCRAM-SHA-512",
        reason="Authentication failed during authentication due to invalid credentials",
        principal="alice", node_id=2,
    )  # fmt: skip
    assert (failed.decision, failed.principal, failed.api, failed.node_id) == (
        "AUTHENTICATION_FAILED",
        "alice",
        "SASL_AUTHENTICATE",
        2,
    )
    assert failed.detail.startswith("SCRAM-SHA-512: Authentication failed")
    session = Session(
        KafkaPrincipal("User", "admin"), "CONTROLLER", SecurityProtocol.PLAINTEXT, "10.9.9.9"
    )
    created = change_event(
        6, session, api="CREATE_ACLS", decision="ACL_CREATED", resource_type="TOPIC",
        resource_name="payments", detail="LITERAL User:bob * WRITE ALLOW", node_id=3000,
    )  # fmt: skip
    assert (created.principal, created.client_address, created.listener) == (
        "User:admin",
        "10.9.9.9",
        "CONTROLLER",
    )


def test_audit_settings_parse_with_kafkas_types():
    assert AuditConfig.from_properties(None) == AuditConfig(False, 10_000)
    config = AuditConfig.from_properties(
        {"audit.log.allowed": "true", "audit.buffer.max.events": "5"}
    )
    assert config == AuditConfig(True, 5)
    with pytest.raises(ConfigError, match="audit.buffer.max.events"):
        AuditConfig.from_properties({"audit.buffer.max.events": "0"})


def test_what_captured_a_switchable_sink_follows_the_switch():
    """The controller starts before the driver's audit table exists: its listener and its
    authorize stage capture its sink at construction, and still reach the table later."""
    controller_sink = SwitchableAuditSink()
    captured = controller_sink  # as a listener or a stage keeps it
    table = BufferedAuditSink(10)
    event = authentication_failed(1, client_address="h", listener="L", mechanism="", reason="r")
    captured.record(event)  # before the switch: the log only
    controller_sink.switch_to(table)
    captured.record(event)
    assert table.drain(10) == [event]
