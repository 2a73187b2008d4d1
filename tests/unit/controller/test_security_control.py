"""The controller's ACL and SCRAM cores, sans-IO: results plus records, nothing applied until
replayed; created credentials log a real SCRAM client in."""

from __future__ import annotations

import uuid

import scramp

from sparklog.controller.acl_control import create_acls, delete_acls
from sparklog.controller.scram_control import (
    ScramDeletion,
    ScramUpsertion,
    alter_user_scram_credentials,
)
from sparklog.errors import (
    DuplicateResourceError,
    InvalidRequestError,
    ResourceNotFoundError,
    UnacceptableCredentialError,
)
from sparklog.metadata.image import MetadataImage
from sparklog.metadata.scram import salted_password
from sparklog.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from sparklog.security.acl_filter import AclBindingFilter
from sparklog.security.credentials import ScramMechanism


def binding(name="t", principal="User:alice", op=AclOperation.READ, pattern=PatternType.LITERAL):
    return AclBinding(
        ResourcePattern(ResourceType.TOPIC, name, pattern),
        AccessControlEntry(principal, "*", op, AclPermissionType.ALLOW),
    )


def replayed(image: MetadataImage, records) -> MetadataImage:
    for record in records:
        image.apply(record)
    return image


def ids():
    n = iter(range(1, 1000))
    return lambda: uuid.UUID(int=next(n))


def test_create_acls_writes_one_record_per_new_binding():
    image = MetadataImage()
    a, b = binding("a"), binding("b", pattern=PatternType.PREFIXED)
    bad = binding("", principal="User:x")
    results, records = create_acls(image, [a, b, a, bad], ids())
    assert [r.code for r in results] == [0, 0, 0, InvalidRequestError.code]
    assert results[3].message == "Invalid empty resource name"
    assert len(records) == 2 and not image.acls  # nothing applied yet
    replayed(image, records)
    assert set(image.acls.values()) == {a, b}
    # an existing binding succeeds again without a record
    results, records = create_acls(image, [a], ids())
    assert results[0].is_success and records == []


def test_delete_acls_lists_a_binding_under_every_filter_and_removes_it_once():
    image = MetadataImage()
    a, b = binding("team-a"), binding("team-", pattern=PatternType.PREFIXED)
    replayed(image, create_acls(image, [a, b], ids())[1])
    match = AclBindingFilter(ResourceType.TOPIC, "team-a", PatternType.MATCH)
    results, records = delete_acls(
        image, [match, AclBindingFilter(name="team-a"), AclBindingFilter(ResourceType.UNKNOWN)]
    )
    assert [(e.code, sorted(x.pattern.name for x in d)) for e, d in results] == [
        (0, ["team-", "team-a"]),
        (0, ["team-a"]),
        (InvalidRequestError.code, []),
    ]
    assert results[2][0].message == "Unknown patternFilter."
    assert len(records) == 2
    assert not replayed(image, records).acls


def test_created_credentials_log_a_scram_client_in():
    image = MetadataImage()
    salt = b"0123456789abcdef"
    upsertion = ScramUpsertion(
        "alice",
        ScramMechanism.SCRAM_SHA_256,
        8192,
        salt,
        salted_password(ScramMechanism.SCRAM_SHA_256, "alice-secret", salt, 8192),
    )
    assert "alice-secret" not in repr(upsertion) and "salted" not in repr(upsertion)
    results, records = alter_user_scram_credentials(image, [], [upsertion])
    assert results == [("alice", results[0][1])] and results[0][1].is_success
    replayed(image, records)

    def auth(user):
        c = image.credentials.scram_credential(ScramMechanism.SCRAM_SHA_256, user)
        return c.salt, c.stored_key, c.server_key, c.iterations

    server = scramp.ScramMechanism("SCRAM-SHA-256").make_server(auth)
    client = scramp.ScramClient(["SCRAM-SHA-256"], "alice", "alice-secret")
    server.set_client_first(client.get_client_first())
    client.set_server_first(server.get_server_first())
    server.set_client_final(client.get_client_final())
    client.set_server_final(server.get_server_final())  # raises unless the server proved itself


def test_alter_scram_refusals_follow_kafka():
    image = MetadataImage()

    def up(user, iterations=4096, mechanism=1):
        return ScramUpsertion(user, mechanism, iterations, b"s", b"p" * 32)

    results, records = alter_user_scram_credentials(
        image,
        [ScramDeletion("ghost", 1), ScramDeletion("ghost", 2)],
        [up("few", 4095), up("twice"), up("twice", mechanism=2), up("ok")],
    )
    codes = {user: error.code for user, error in results}
    assert codes == {
        "ghost": ResourceNotFoundError.code,
        "twice": DuplicateResourceError.code,
        "few": UnacceptableCredentialError.code,
        "ok": 0,
    }
    assert [user for user, _ in results][0] == "ok"  # successes first, then failures
    assert len(records) == 1
