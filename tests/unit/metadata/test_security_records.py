"""ACL and SCRAM credential records in the metadata image: replay, removal, refusal of bad
records (image unchanged), snapshots (and snapshots from before these records), the
`CredentialStore` view, and a broker's image built from fetched batches."""

from __future__ import annotations

import uuid

import pytest
import scramp

from sparklog.metadata.acls import acl_record, remove_acl_record
from sparklog.metadata.image import MetadataImage
from sparklog.metadata.log_records import MetadataRecordError, encode_record
from sparklog.metadata.scram import remove_scram_record, scram_record
from sparklog.records import SimpleRecord, build_batch
from sparklog.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from sparklog.security.credentials import CredentialStore, ScramCredential, ScramMechanism

ID_A, ID_B = uuid.UUID(int=0xA), uuid.UUID(int=0xB)
READ_T = AclBinding(
    ResourcePattern(ResourceType.TOPIC, "t"),
    AccessControlEntry("User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW),
)
DENY_PREFIX = AclBinding(
    ResourcePattern(ResourceType.GROUP, "g-", PatternType.PREFIXED),
    AccessControlEntry("User:*", "10.0.0.1", AclOperation.ALL, AclPermissionType.DENY),
)


def credential(password: str = "alice-secret", mechanism: str = "SCRAM-SHA-256") -> ScramCredential:
    """A real SCRAM credential made by scramp (what a client's salted password yields)."""
    salt, stored_key, server_key, iterations = scramp.ScramMechanism(mechanism).make_auth_info(
        password, iteration_count=4096
    )
    return ScramCredential(salt, stored_key, server_key, iterations)


def test_acl_records_replay_into_id_to_binding():
    image = MetadataImage()
    image.apply(acl_record(ID_A, READ_T))
    image.apply(acl_record(ID_B, DENY_PREFIX))
    assert dict(image.acls) == {ID_A: READ_T, ID_B: DENY_PREFIX}
    assert image.offset == 2
    image.apply(remove_acl_record(ID_A))
    assert dict(image.acls) == {ID_B: DENY_PREFIX}
    with pytest.raises(TypeError):
        image.acls[ID_A] = READ_T  # type: ignore[index]  # read-only view


@pytest.mark.parametrize(
    "change, message",
    [
        ({"resource_type": int(ResourceType.ANY)}, "resourceType"),
        ({"pattern_type": int(PatternType.MATCH)}, "patternType"),
        ({"operation": int(AclOperation.ANY)}, "operation"),
        ({"permission_type": int(AclPermissionType.ANY)}, "permissionType"),
        ({"resource_name": ""}, "empty"),
        ({"principal": "alice"}, "colon"),
        ({"operation": 99}, "AclOperation"),
        ({"id": "not-a-uuid"}, "malformed"),
    ],
)
def test_bad_acl_records_are_refused_and_change_nothing(change, message):
    image = MetadataImage()
    image.apply(acl_record(ID_A, READ_T))
    before = image.to_dict()
    with pytest.raises(MetadataRecordError, match=message):
        image.apply({**acl_record(ID_B, DENY_PREFIX), **change})
    assert image.to_dict() == before


def test_duplicate_id_or_binding_and_unknown_removal_are_refused():
    image = MetadataImage()
    image.apply(acl_record(ID_A, READ_T))
    with pytest.raises(MetadataRecordError, match="already exists"):
        image.apply(acl_record(ID_A, DENY_PREFIX))
    with pytest.raises(MetadataRecordError, match="repeats"):
        image.apply(acl_record(ID_B, READ_T))
    with pytest.raises(MetadataRecordError, match="no ACL"):
        image.apply(remove_acl_record(ID_B))
    assert dict(image.acls) == {ID_A: READ_T} and image.offset == 1


def test_scram_records_make_the_image_a_credential_store():
    image = MetadataImage()
    store: CredentialStore = image.credentials
    alice256, alice512 = credential(), credential(mechanism="SCRAM-SHA-512")
    image.apply(scram_record("alice", ScramMechanism.SCRAM_SHA_256, alice256))
    image.apply(scram_record("alice", ScramMechanism.SCRAM_SHA_512, alice512))
    image.apply(scram_record("bob", ScramMechanism.SCRAM_SHA_256, credential("bob")))
    assert store.scram_credential(ScramMechanism.SCRAM_SHA_256, "alice") == alice256
    assert store.scram_credential(ScramMechanism.SCRAM_SHA_512, "alice") == alice512
    assert store.scram_credential(ScramMechanism.SCRAM_SHA_512, "bob") is None
    assert image.credentials.users() == {
        "alice": {ScramMechanism.SCRAM_SHA_256: 4096, ScramMechanism.SCRAM_SHA_512: 4096},
        "bob": {ScramMechanism.SCRAM_SHA_256: 4096},
    }
    # a new credential for the same user and mechanism replaces the old one
    replaced = credential("new-password")
    image.apply(scram_record("alice", ScramMechanism.SCRAM_SHA_256, replaced))
    assert store.scram_credential(ScramMechanism.SCRAM_SHA_256, "alice") == replaced
    image.apply(remove_scram_record("alice", ScramMechanism.SCRAM_SHA_256))
    assert store.scram_credential(ScramMechanism.SCRAM_SHA_256, "alice") is None
    with pytest.raises(MetadataRecordError, match="no SCRAM-SHA-256 credential of user alice"):
        image.apply(remove_scram_record("alice", ScramMechanism.SCRAM_SHA_256))


def test_a_stored_credential_authenticates_a_real_scram_exchange():
    """The stored (salt, StoredKey, ServerKey, iterations) are exactly what scramp's server
    needs: a client knowing the password logs in, one with another password does not."""
    image = MetadataImage()
    image.apply(
        scram_record("alice", ScramMechanism.SCRAM_SHA_512, credential("pw", "SCRAM-SHA-512"))
    )

    def auth_fn(user):
        c = image.credentials.scram_credential(ScramMechanism.SCRAM_SHA_512, user)
        assert c is not None
        return c.salt, c.stored_key, c.server_key, c.iterations

    def login(password):
        server = scramp.ScramMechanism("SCRAM-SHA-512").make_server(auth_fn)
        client = scramp.ScramClient(["SCRAM-SHA-512"], "alice", password)
        server.set_client_first(client.get_client_first())
        client.set_server_first(server.get_server_first())
        server.set_client_final(client.get_client_final())
        client.set_server_final(server.get_server_final())

    login("pw")
    with pytest.raises(scramp.ScramException):
        login("wrong")


@pytest.mark.parametrize(
    "change, message",
    [
        ({"iterations": 4095}, "outside 4096-16384"),
        ({"iterations": 16385}, "outside"),
        ({"mechanism": 0}, "UNKNOWN"),
        ({"mechanism": 3}, "ScramMechanism"),
        ({"name": ""}, "empty user"),
        ({"salt": "%%%"}, "base64"),
    ],
)
def test_bad_scram_records_are_refused_and_change_nothing(change, message):
    image = MetadataImage()
    good = scram_record("alice", ScramMechanism.SCRAM_SHA_256, credential())
    image.apply(good)
    before = image.to_dict()
    with pytest.raises(MetadataRecordError, match=message):
        image.apply({**good, "name": "bob", **change})
    assert image.to_dict() == before


def test_snapshot_round_trip_keeps_acls_and_credentials():
    image = MetadataImage()
    image.apply(acl_record(ID_A, READ_T))
    image.apply(acl_record(ID_B, DENY_PREFIX))
    image.apply(scram_record("alice", ScramMechanism.SCRAM_SHA_256, credential()))
    restored = MetadataImage.from_dict(image.to_dict())
    assert restored == image
    assert dict(restored.acls) == dict(image.acls)
    assert restored.credentials.scram_credential(
        ScramMechanism.SCRAM_SHA_256, "alice"
    ) == image.credentials.scram_credential(ScramMechanism.SCRAM_SHA_256, "alice")
    # replay goes on from the snapshot: the removal finds the ACL it created
    restored.apply(remove_acl_record(ID_A))
    assert list(restored.acls) == [ID_B]


def test_snapshots_from_before_security_records_load_with_none():
    data = MetadataImage().to_dict()
    del data["acls"], data["scram_credentials"]
    image = MetadataImage.from_dict(data)
    assert not image.acls and not image.credentials.users()


def test_credentials_never_show_their_keys():
    c = credential()
    image = MetadataImage()
    image.apply(scram_record("alice", ScramMechanism.SCRAM_SHA_256, c))
    for text in (repr(c), repr(image.credentials), repr(image)):
        assert c.salt.hex() not in text and c.stored_key.hex() not in text
        assert str(c.stored_key) not in text


def test_a_broker_image_follows_acl_and_credential_records_from_fetched_batches():
    records = [
        acl_record(ID_A, READ_T),
        scram_record("alice", ScramMechanism.SCRAM_SHA_512, credential(mechanism="SCRAM-SHA-512")),
        acl_record(ID_B, DENY_PREFIX),
        remove_acl_record(ID_A),
    ]
    batch = build_batch([SimpleRecord(value=encode_record(r)) for r in records], base_offset=0)
    follower = MetadataImage()
    assert follower.apply_batches(batch) == 4
    assert dict(follower.acls) == {ID_B: DENY_PREFIX}
    assert follower.credentials.users() == {"alice": {ScramMechanism.SCRAM_SHA_512: 4096}}


def test_current_credentials_follow_the_image_they_are_pointed_at():
    from sparklog.metadata.scram import CurrentCredentials

    first, second = MetadataImage(), MetadataImage()
    second.apply(scram_record("alice", ScramMechanism.SCRAM_SHA_256, credential()))
    holder = {"image": first}
    store: CredentialStore = CurrentCredentials(lambda: holder["image"])
    assert store.scram_credential(ScramMechanism.SCRAM_SHA_256, "alice") is None
    holder["image"] = second  # e.g. a restarted controller's image
    assert store.scram_credential(ScramMechanism.SCRAM_SHA_256, "alice") is not None
    holder["image"] = None  # no controller running
    assert store.scram_credential(ScramMechanism.SCRAM_SHA_256, "alice") is None
