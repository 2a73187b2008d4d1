"""Client quota records in the metadata image (`metadata/quotas.py`): replay and removal, Kafka's
eight-level precedence with client-id prefixes, the metric tags a lookup resolves to, ip and
topic quotas, refusal of bad records (image unchanged), snapshots, a broker's image built from
fetched batches, and what 10,000 entities cost (counted probes, bounded memory)."""

from __future__ import annotations

import gc
import tracemalloc

import pytest

from sparklog.metadata.image import MetadataImage
from sparklog.metadata.log_records import MetadataRecordError, encode_record
from sparklog.metadata.quotas import (
    CLIENT_ID,
    CLIENT_ID_PREFIX,
    CONNECTION_CREATION_RATE,
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    TOPIC,
    USER,
    ClientQuotaEntity,
    InvalidQuotaError,
    QuotasImage,
    keys_for,
    quota_record,
)
from sparklog.records import SimpleRecord, build_batch

P = PRODUCER_BYTE_RATE


def entity(**entries: str | None) -> ClientQuotaEntity:
    """entity(user="alice", client_id=None): keyword names with `_` for `-`."""
    return ClientQuotaEntity.of({k.replace("_", "-"): v for k, v in entries.items()})


def image_with(*quotas: tuple[ClientQuotaEntity, str, float]) -> MetadataImage:
    image = MetadataImage()
    for e, key, value in quotas:
        image.apply(quota_record(e, key, value))
    return image


def test_records_set_overwrite_and_remove_quotas_and_bump_the_version():
    alice = entity(user="alice")
    image = image_with((alice, P, 1024), (alice, CONSUMER_BYTE_RATE, 2048))
    assert dict(image.quotas.quotas(alice)) == {P: 1024.0, CONSUMER_BYTE_RATE: 2048.0}
    assert (image.offset, image.quotas.version) == (2, 2)
    image.apply(quota_record(alice, P, 4096))
    assert image.quotas.client_quota(P, "alice", "c").limit == 4096.0  # type: ignore[union-attr]
    image.apply(quota_record(alice, P, None))
    assert image.quotas.client_quota(P, "alice", "c") is None  # no quota = no limit
    assert dict(image.quotas.quotas(alice)) == {CONSUMER_BYTE_RATE: 2048.0}
    image.apply(quota_record(alice, CONSUMER_BYTE_RATE, None))
    assert len(image.quotas) == 0 and image.quotas.version == 5
    assert str(entity(user="alice", client_id=None)) == "client-id=<default>, user=alice"


# Every level of Kafka's DefaultQuotaCallback (plus the prefixes sparklog puts right below an
# exact client id), most specific first, with the tags of the sensor enforcing it: real user
# and client id at the levels the entity names, "" at the others.
LEVELS = [
    (entity(user="alice", client_id="app-1"), ("alice", CLIENT_ID, "app-1")),
    (entity(user="alice", client_id_prefix="app-"), ("alice", CLIENT_ID_PREFIX, "app-")),
    (entity(user="alice", client_id=None), ("alice", CLIENT_ID, "app-1")),
    (entity(user="alice"), ("alice", CLIENT_ID, "")),
    (entity(user=None, client_id="app-1"), ("alice", CLIENT_ID, "app-1")),
    (entity(user=None, client_id_prefix="app"), ("alice", CLIENT_ID_PREFIX, "app")),
    (entity(user=None, client_id=None), ("alice", CLIENT_ID, "app-1")),
    (entity(user=None), ("alice", CLIENT_ID, "")),
    (entity(client_id="app-1"), ("", CLIENT_ID, "app-1")),
    (entity(client_id_prefix="ap"), ("", CLIENT_ID_PREFIX, "ap")),
    (entity(client_id=None), ("", CLIENT_ID, "app-1")),
]


def test_client_quota_follows_kafkas_precedence_level_by_level():
    image = image_with(*((e, P, 100.0 + i) for i, (e, _) in enumerate(LEVELS)))
    quotas = image.quotas
    for i, (e, (user_tag, client_tag, client_value)) in enumerate(LEVELS):
        resolved = quotas.client_quota(P, "alice", "app-1")
        assert resolved is not None, e
        assert (resolved.limit, resolved.entity) == (100.0 + i, e)
        assert resolved.tags == ((USER, user_tag), (client_tag, client_value))
        image.apply(quota_record(e, P, None))  # remove it: the next level answers
    assert quotas.client_quota(P, "alice", "app-1") is None


def test_each_key_resolves_on_its_own():
    # Kafka keeps one callback per quota type: a user's producer rate does not hide the
    # client default's consumer rate
    image = image_with(
        (entity(user="alice"), P, 10), (entity(client_id=None), CONSUMER_BYTE_RATE, 20)
    )
    assert image.quotas.client_quota(P, "alice", "c").limit == 10  # type: ignore[union-attr]
    consumer = image.quotas.client_quota(CONSUMER_BYTE_RATE, "alice", "c")
    assert consumer is not None and consumer.entity == entity(client_id=None)
    assert image.quotas.client_quota(REQUEST_PERCENTAGE, "alice", "c") is None
    assert image.quotas.client_quota(P, "bob", "c") is None


def test_the_longest_client_id_prefix_wins_and_its_clients_share_one_sensor():
    image = image_with(
        (entity(client_id_prefix="etl"), P, 1),
        (entity(client_id_prefix="etl-nightly-"), P, 2),
        (entity(client_id="etl-nightly-7"), P, 3),
    )
    q = image.quotas
    a, b = q.client_quota(P, "u", "etl-nightly-1"), q.client_quota(P, "v", "etl-nightly-2")
    assert a is not None and b is not None and a.limit == b.limit == 2
    assert a.tags == b.tags == ((USER, ""), (CLIENT_ID_PREFIX, "etl-nightly-"))
    assert q.client_quota(P, "u", "etl-hourly").limit == 1  # type: ignore[union-attr]
    assert q.client_quota(P, "u", "etl-nightly-7").limit == 3  # type: ignore[union-attr]
    assert q.client_quota(P, "u", "etl").limit == 1  # type: ignore[union-attr]  # whole id
    assert q.client_quota(P, "u", "et") is None
    image.apply(quota_record(entity(client_id_prefix="etl-nightly-"), P, None))
    assert q.client_quota(P, "u", "etl-nightly-1").limit == 1  # type: ignore[union-attr]


def test_ip_quotas_match_the_address_then_the_default():
    image = image_with(
        (ClientQuotaEntity.of({"ip": "::1"}), CONNECTION_CREATION_RATE, 5),
        (ClientQuotaEntity.of({"ip": None}), CONNECTION_CREATION_RATE, 50),
    )
    exact = image.quotas.ip_quota("0:0::1")  # the same address spelled differently
    assert exact is not None and exact.limit == 5 and exact.tags == (("ip", "::1"),)
    default = image.quotas.ip_quota("127.0.0.1")
    assert default is not None and default.limit == 50 and default.tags == (("ip", "127.0.0.1"),)
    assert MetadataImage().quotas.ip_quota("127.0.0.1") is None
    # two spellings of one address: removing one leaves the other's quota in force
    image.apply(quota_record(ClientQuotaEntity.of({"ip": "0:0::1"}), CONNECTION_CREATION_RATE, 6))
    image.apply(
        quota_record(ClientQuotaEntity.of({"ip": "0:0::1"}), CONNECTION_CREATION_RATE, None)
    )
    assert image.quotas.ip_quota("::1").limit == 5  # type: ignore[union-attr]


def test_topic_quotas_match_the_topic_then_the_default():
    image = image_with((entity(topic="orders"), P, 7), (entity(topic=None), P, 70))
    assert image.quotas.topic_quota(P, "orders").limit == 7  # type: ignore[union-attr]
    other = image.quotas.topic_quota(P, "clicks")
    assert other is not None and other.limit == 70 and other.tags == ((TOPIC, "clicks"),)
    assert image.quotas.topic_quota(CONSUMER_BYTE_RATE, "orders") is None


def test_entity_combinations_decide_the_keys():
    assert P in keys_for(entity(user="u", client_id="c"))
    assert keys_for(ClientQuotaEntity.of({"ip": "1.2.3.4"})) == {CONNECTION_CREATION_RATE}
    assert REQUEST_PERCENTAGE not in keys_for(entity(topic="t"))
    with pytest.raises(InvalidQuotaError, match="do not combine"):
        keys_for(ClientQuotaEntity.of({"ip": "1.2.3.4", "user": "u"}))


def bad(record_change: dict, base: dict | None = None) -> dict:
    return (base or quota_record(entity(user="alice"), P, 10)) | record_change


@pytest.mark.parametrize(
    "record, message",
    [
        (bad({"entity": [{"entity_type": "group", "entity_name": "g"}]}), "Unhandled client quota entity type: group"),
        (bad({"entity": []}), "Invalid empty client quota entity"),
        (bad({"entity": [{"entity_type": "user", "entity_name": ""}]}), "Empty user not supported"),
        (bad({"entity": [{"entity_type": "user", "entity_name": "a"}, {"entity_type": "user", "entity_name": "b"}]}), "duplicate entity type user"),
        (bad({"entity": [{"entity_type": "user", "entity_name": "a"}, {"entity_type": "ip", "entity_name": None}]}), "do not combine"),
        (bad({"entity": [{"entity_type": "client-id-prefix", "entity_name": None}]}), "needs a name"),
        (bad({"key": CONNECTION_CREATION_RATE}), "Invalid configuration key connection_creation_rate"),
        (bad({"key": "bogus"}), "Invalid configuration key bogus"),
        (bad({"value": "10"}), "not a number"),
        (bad({"value": True}), "not a number"),
        (bad({"remove": "yes"}), "not a boolean"),
        (quota_record(entity(user="alice"), CONSUMER_BYTE_RATE, None), "no quota consumer_byte_rate"),
        ({"type": "ClientQuota", "key": P, "value": 1.0}, "KeyError"),
    ],
)  # fmt: skip
def test_bad_quota_records_are_refused_and_change_nothing(record, message):
    image = image_with((entity(user="alice"), P, 10))
    before, version = image.to_dict(), image.quotas.version
    with pytest.raises(MetadataRecordError, match=message):
        image.apply(record)
    assert image.to_dict() == before and image.quotas.version == version


def test_snapshots_keep_quotas_and_older_snapshots_load_with_none():
    image = image_with(*((e, P, 100.0 + i) for i, (e, _) in enumerate(LEVELS)))
    image.apply(quota_record(ClientQuotaEntity.of({"ip": None}), CONNECTION_CREATION_RATE, 3))
    restored = MetadataImage.from_dict(image.to_dict())
    assert restored == image
    assert restored.quotas.client_quota(P, "alice", "app-1").limit == 100.0  # type: ignore[union-attr]
    assert restored.quotas.ip_quota("10.0.0.1").limit == 3  # type: ignore[union-attr]
    old = image.to_dict()
    del old["client_quotas"]
    assert len(MetadataImage.from_dict(old).quotas) == 0


def test_a_broker_image_follows_quota_records_from_fetched_batches():
    records = [
        quota_record(entity(user=None), P, 1000),
        quota_record(entity(user="alice", client_id=None), P, 500),
        quota_record(entity(user=None), P, None),
    ]
    batch = build_batch([SimpleRecord(value=encode_record(r)) for r in records], base_offset=0)
    follower = MetadataImage()
    assert follower.apply_batches(batch) == 3
    assert follower.quotas.client_quota(P, "bob", "c") is None
    assert follower.quotas.client_quota(P, "alice", "c").limit == 500  # type: ignore[union-attr]
    expected = image_with((entity(user="alice", client_id=None), P, 500))
    assert follower.quotas.to_list() == expected.quotas.to_list()


class CountingDict(dict):
    """A dict counting its `get` calls: the lookups probe the index with `get` only."""

    probes = 0

    def get(self, *args):  # type: ignore[override]
        CountingDict.probes += 1
        return super().get(*args)


def ten_thousand_entities() -> QuotasImage:
    quotas = QuotasImage()
    for i in range(2_500):
        quotas.replay(quota_record(entity(user=f"user-{i}"), P, i + 1))
        quotas.replay(quota_record(entity(client_id=f"client-{i}"), P, i + 1))
        quotas.replay(quota_record(entity(user=f"user-{i}", client_id=f"client-{i}"), P, i + 1))
        quotas.replay(quota_record(entity(client_id_prefix=f"batch-{i:04d}-"), P, i + 1))
    return quotas


def test_lookups_probe_a_bounded_number_of_entries_among_10000_entities():
    quotas = ten_thousand_entities()
    assert len(quotas) == 10_000
    quotas._index[P] = CountingDict(quotas._index[P])
    cases = [
        ("user-7", "client-7", "user-7/client-7"),  # the first level
        ("user-7", "client-8", "user-7"),  # the third
        ("nobody", "client-9", "client-9"),  # the ninth
        ("nobody", "batch-0042-x", "prefix"),  # a prefix, the tenth
        ("nobody", "nothing-at-all", None),  # all eleven levels miss
    ]
    for user, client_id, _ in cases:
        CountingDict.probes = 0
        resolved = quotas.client_quota(P, user, client_id)
        # 3 user specs x (client id, one per distinct prefix length (one here), default
        # client, user alone), whatever the number of entities
        assert CountingDict.probes <= 11, (user, client_id, CountingDict.probes)
        assert (resolved is None) == (client_id == "nothing-at-all")


def test_10000_entities_stay_within_a_memory_bound():
    gc.collect()
    tracemalloc.start()
    try:
        quotas = ten_thousand_entities()
        size, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(quotas) == 10_000
    # entity, its key map and the index entry: a few hundred bytes each, not kilobytes
    assert size < 10_000 * 1_000, size


def test_describe_matches_exact_default_and_any_names_strict_or_not():
    from sparklog.errors import InvalidRequestError, UnsupportedVersionError
    from sparklog.metadata.quotas import (
        MATCH_ANY,
        MATCH_DEFAULT,
        MATCH_EXACT,
        describe_client_quotas,
    )

    image = image_with(
        (entity(user="alice"), P, 1),
        (entity(user="alice", client_id="app"), P, 2),
        (entity(user=None, client_id=None), P, 3),
        (entity(client_id=None), P, 4),
        (entity(ip=None), CONNECTION_CREATION_RATE, 5),
    )

    def names(*components, strict=False):
        return [str(e) for e, _ in describe_client_quotas(image.quotas, components, strict)]

    assert names(("user", MATCH_EXACT, "alice")) == ["client-id=app, user=alice", "user=alice"]
    assert names(("user", MATCH_EXACT, "alice"), strict=True) == ["user=alice"]
    assert names(("user", MATCH_DEFAULT, None)) == ["client-id=<default>, user=<default>"]
    assert names(("client-id", MATCH_DEFAULT, None), strict=True) == ["client-id=<default>"]
    assert names(("client-id", MATCH_ANY, None), ("user", MATCH_ANY, None), strict=True) == [
        "client-id=<default>, user=<default>",
        "client-id=app, user=alice",
    ]
    assert len(names()) == 5 and names(strict=True) == []
    with pytest.raises(UnsupportedVersionError, match="Unsupported entity type group"):
        names(("group", MATCH_ANY, None))
    with pytest.raises(InvalidRequestError, match="IP filter component should not be used"):
        names(("ip", MATCH_ANY, None), ("user", MATCH_ANY, None))
    with pytest.raises(InvalidRequestError, match="cannot appear more than once"):
        names(("user", MATCH_ANY, None), ("user", MATCH_EXACT, "x"))
    with pytest.raises(InvalidRequestError, match="MATCH_TYPE_EXACT, but set match string to null"):
        names(("user", MATCH_EXACT, None))
