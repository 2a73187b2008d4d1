"""StandardAuthorizer: Kafka's documented semantics case by case, property tests against a
straightforward reference matcher, and the index staying proportional to what applies."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparklog.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from sparklog.security.session import KafkaPrincipal, Session
from sparklog.security.standard_authorizer import (
    StandardAuthorizer,
    check_authorizer_class,
    parse_super_users,
)

Op = AclOperation
RT = ResourceType
ALLOW = AclPermissionType.ALLOW
DENY = AclPermissionType.DENY
LIT = PatternType.LITERAL
PRE = PatternType.PREFIXED


def acl(
    name: str,
    op: AclOperation,
    perm: AclPermissionType = ALLOW,
    *,
    principal: str = "User:alice",
    host: str = "*",
    rtype: ResourceType = RT.TOPIC,
    pattern: PatternType = LIT,
) -> AclBinding:
    return AclBinding(
        ResourcePattern(rtype, name, pattern), AccessControlEntry(principal, host, op, perm)
    )


def session(user: str = "alice", host: str = "10.0.0.1") -> Session:
    return Session(principal=KafkaPrincipal("User", user), client_address=host)


ALICE = session()
BOB = session("bob")


def test_no_acls_denies_by_default_and_allow_everyone_allows():
    assert not StandardAuthorizer().authorize(ALICE, Op.READ, RT.TOPIC, "t")
    assert StandardAuthorizer(allow_everyone_if_no_acl_found=True).authorize(
        ALICE, Op.READ, RT.TOPIC, "t"
    )


def test_allow_everyone_only_when_no_acl_applies_to_the_resource():
    # bob has an ACL on "t": alice (no matching ACL) is denied even with allow-everyone
    authz = StandardAuthorizer(
        allow_everyone_if_no_acl_found=True, acls=[acl("t", Op.READ, principal="User:bob")]
    )
    assert not authz.authorize(ALICE, Op.READ, RT.TOPIC, "t")
    assert authz.authorize(BOB, Op.READ, RT.TOPIC, "t")
    assert authz.authorize(ALICE, Op.READ, RT.TOPIC, "other")


def test_literal_prefixed_and_wildcard_resources():
    authz = StandardAuthorizer(
        acls=[
            acl("orders", Op.READ),
            acl("logs-", Op.WRITE, pattern=PRE),
            acl("*", Op.READ, rtype=RT.GROUP),
        ]
    )
    assert authz.authorize(ALICE, Op.READ, RT.TOPIC, "orders")
    assert not authz.authorize(ALICE, Op.READ, RT.TOPIC, "orders2")  # literal is exact
    assert authz.authorize(ALICE, Op.WRITE, RT.TOPIC, "logs-app")
    assert authz.authorize(ALICE, Op.WRITE, RT.TOPIC, "logs-")
    assert not authz.authorize(ALICE, Op.WRITE, RT.TOPIC, "logs")
    assert authz.authorize(ALICE, Op.READ, RT.GROUP, "any-group")
    assert not authz.authorize(ALICE, Op.READ, RT.TRANSACTIONAL_ID, "orders")  # type matters


def test_deny_wins_over_allow_from_any_pattern():
    authz = StandardAuthorizer(
        acls=[
            acl("*", Op.ALL),
            acl("secret-", Op.READ, DENY, pattern=PRE),
        ]
    )
    assert authz.authorize(ALICE, Op.READ, RT.TOPIC, "public")
    assert not authz.authorize(ALICE, Op.READ, RT.TOPIC, "secret-x")
    assert authz.authorize(ALICE, Op.WRITE, RT.TOPIC, "secret-x")


def test_implied_operations_are_for_allow_only():
    authz = StandardAuthorizer(
        acls=[
            acl("r", Op.READ),
            acl("w", Op.WRITE),
            acl("d", Op.DELETE),
            acl("a", Op.ALTER),
            acl("c", Op.CREATE),
            acl("ac", Op.ALTER_CONFIGS),
            acl("dn", Op.READ, DENY),
            acl("dn", Op.DESCRIBE),
        ]
    )
    for name in ("r", "w", "d", "a"):
        assert authz.authorize(ALICE, Op.DESCRIBE, RT.TOPIC, name), name
    assert not authz.authorize(ALICE, Op.DESCRIBE, RT.TOPIC, "c")  # CREATE implies nothing
    assert authz.authorize(ALICE, Op.DESCRIBE_CONFIGS, RT.TOPIC, "ac")
    assert not authz.authorize(ALICE, Op.DESCRIBE, RT.TOPIC, "ac")
    assert not authz.authorize(ALICE, Op.READ, RT.TOPIC, "r2")
    # DENY READ does not deny DESCRIBE
    assert authz.authorize(ALICE, Op.DESCRIBE, RT.TOPIC, "dn")
    assert not authz.authorize(ALICE, Op.READ, RT.TOPIC, "dn")


def test_all_allows_and_denies_every_operation():
    authz = StandardAuthorizer(acls=[acl("t", Op.ALL), acl("u", Op.ALL, DENY), acl("u", Op.READ)])
    for op in (Op.READ, Op.WRITE, Op.DESCRIBE, Op.ALTER_CONFIGS, Op.DELETE):
        assert authz.authorize(ALICE, op, RT.TOPIC, "t")
        assert not authz.authorize(ALICE, op, RT.TOPIC, "u")


def test_wildcard_principal_and_hosts():
    authz = StandardAuthorizer(
        acls=[
            acl("t", Op.READ, principal="User:*"),
            acl("h", Op.READ, host="10.0.0.1"),
            acl("t", Op.READ, DENY, principal="User:mallory"),
        ]
    )
    assert authz.authorize(BOB, Op.READ, RT.TOPIC, "t")
    assert not authz.authorize(session("mallory"), Op.READ, RT.TOPIC, "t")
    assert authz.authorize(ALICE, Op.READ, RT.TOPIC, "h")
    assert not authz.authorize(session(host="10.0.0.2"), Op.READ, RT.TOPIC, "h")
    # as Kafka's matchingPrincipals: User:* covers principals of any type
    other_type = Session(principal=KafkaPrincipal("Group", "x"), client_address="10.0.0.1")
    assert authz.authorize(other_type, Op.READ, RT.TOPIC, "t")


def test_super_users_bypass_denies():
    authz = StandardAuthorizer(
        super_users="User:admin; User:broker", acls=[acl("t", Op.ALL, DENY, principal="User:*")]
    )
    assert authz.authorize(session("admin"), Op.READ, RT.TOPIC, "t")
    assert authz.authorize(session("broker"), Op.CLUSTER_ACTION, RT.CLUSTER, "kafka-cluster")
    assert not authz.authorize(ALICE, Op.READ, RT.TOPIC, "t")


def test_acl_changes_take_effect_on_the_next_decision():
    authz = StandardAuthorizer()
    acl_id = uuid.uuid4()
    assert not authz.authorize(ALICE, Op.READ, RT.TOPIC, "t")  # cached as denied
    authz.add_acl(acl_id, acl("t", Op.READ))
    assert authz.authorize(ALICE, Op.READ, RT.TOPIC, "t")
    authz.remove_acl(acl_id)
    assert not authz.authorize(ALICE, Op.READ, RT.TOPIC, "t")
    authz.remove_acl(acl_id)  # unknown id: ignored
    authz.load_snapshot({acl_id: acl("t", Op.READ)})
    assert authz.authorize(ALICE, Op.READ, RT.TOPIC, "t")
    assert len(authz) == 1


@pytest.mark.parametrize(
    "binding, problem",
    [
        (acl("", Op.READ), "name must not be empty"),
        (acl("t", Op.ANY), "operation must be concrete"),
        (acl("t", Op.READ, AclPermissionType.ANY), "ALLOW or DENY"),
        (acl("t", Op.READ, pattern=PatternType.MATCH), "LITERAL or PREFIXED"),
        (acl("t", Op.READ, rtype=RT.ANY), "resource type must be concrete"),
        (acl("t", Op.READ, principal="alice"), "type:name"),
    ],
)
def test_invalid_bindings_are_refused_and_nothing_changes(binding, problem):
    authz = StandardAuthorizer(acls=[acl("t", Op.READ)])
    with pytest.raises(ValueError, match=problem):
        authz.load_snapshot([acl("u", Op.READ), binding])
    assert authz.authorize(ALICE, Op.READ, RT.TOPIC, "t")
    assert not authz.authorize(ALICE, Op.READ, RT.TOPIC, "u")


def test_settings_parsing():
    assert parse_super_users("User:a;;User:b ") == {"User:a", "User:b"}
    assert parse_super_users(None) == frozenset()
    with pytest.raises(ValueError, match="type:name"):
        parse_super_users("admin")
    assert check_authorizer_class("org.apache.kafka.metadata.authorizer.StandardAuthorizer")
    assert check_authorizer_class("StandardAuthorizer")
    assert not check_authorizer_class("")
    assert not check_authorizer_class(None)
    with pytest.raises(ValueError, match="removed in Kafka 4.0"):
        check_authorizer_class("kafka.security.authorizer.AclAuthorizer")
    with pytest.raises(ValueError, match="StandardAuthorizer"):
        check_authorizer_class("com.example.Mine")


def test_authorize_by_resource_type():
    def by_type(*acls, **kw):
        return StandardAuthorizer(acls=acls, **kw).authorize_by_resource_type(
            ALICE, Op.WRITE, RT.TOPIC
        )

    assert not by_type()
    assert by_type(allow_everyone_if_no_acl_found=True)
    assert by_type(acl("t", Op.WRITE))
    assert not by_type(acl("t", Op.WRITE), acl("t", Op.WRITE, DENY))
    assert by_type(acl("t", Op.WRITE), acl("u", Op.WRITE, DENY))
    assert not by_type(acl("tx", Op.WRITE), acl("t", Op.WRITE, DENY, pattern=PRE))
    assert not by_type(acl("*", Op.WRITE), acl("*", Op.WRITE, DENY))
    assert by_type(acl("*", Op.ALL))
    assert not by_type(acl("t", Op.READ))
    assert StandardAuthorizer(super_users="User:alice").authorize_by_resource_type(
        ALICE, Op.WRITE, RT.TOPIC
    )


# -- property test: the index against a straightforward reference ---------------------------

_IMPLIES = {
    Op.DESCRIBE: {Op.READ, Op.WRITE, Op.DELETE, Op.ALTER},
    Op.DESCRIBE_CONFIGS: {Op.ALTER_CONFIGS},
}


def reference(acls, super_users, allow_everyone, user, host, op, rtype, name) -> bool:
    """Kafka's documented rules read literally, one ACL at a time."""
    if f"User:{user}" in super_users:
        return True
    applicable = [
        b
        for b in acls
        if b.pattern.resource_type == rtype
        and (
            (b.pattern.pattern_type == LIT and b.pattern.name in (name, "*"))
            or (b.pattern.pattern_type == PRE and name.startswith(b.pattern.name))
        )
    ]
    if not applicable:
        return allow_everyone
    matching = [
        b
        for b in applicable
        if b.entry.principal in (f"User:{user}", "User:*")
        and b.entry.host in (host, "*")
        and (
            b.entry.operation in (op, Op.ALL)
            or (b.entry.permission_type == ALLOW and b.entry.operation in _IMPLIES.get(op, ()))
        )
    ]
    if any(b.entry.permission_type == DENY for b in matching):
        return False
    return any(b.entry.permission_type == ALLOW for b in matching)


NAMES = st.sampled_from(["a", "ab", "abc", "abd", "b", "ba", "*", "abcd"])
USERS = st.sampled_from(["alice", "bob", "carol"])
HOSTS = st.sampled_from(["10.0.0.1", "10.0.0.2"])
OPS = st.sampled_from([o for o in AclOperation if o not in (Op.ANY, Op.UNKNOWN)])
TYPES = st.sampled_from([RT.TOPIC, RT.GROUP, RT.CLUSTER])
BINDINGS = st.builds(
    lambda name, op, perm, principal, host, rtype, pattern: acl(
        name, op, perm, principal=principal, host=host, rtype=rtype, pattern=pattern
    ),
    NAMES,
    OPS,
    st.sampled_from([ALLOW, DENY]),
    st.sampled_from(["User:alice", "User:bob", "User:*"]),
    st.sampled_from(["*", "10.0.0.1", "10.0.0.2"]),
    TYPES,
    st.sampled_from([LIT, PRE]),
)


@settings(max_examples=300, deadline=None)
@given(
    acls=st.lists(BINDINGS, max_size=12),
    super_users=st.sets(st.sampled_from(["User:carol", "User:bob"]), max_size=1),
    allow_everyone=st.booleans(),
    queries=st.lists(st.tuples(USERS, HOSTS, OPS, TYPES, NAMES), min_size=1, max_size=10),
)
def test_matches_the_reference(acls, super_users, allow_everyone, queries):
    authz = StandardAuthorizer(
        super_users=sorted(super_users), allow_everyone_if_no_acl_found=allow_everyone, acls=acls
    )
    for user, host, op, rtype, name in queries:
        expected = reference(acls, super_users, allow_everyone, user, host, op, rtype, name)
        sess = session(user, host)
        assert authz.authorize(sess, op, rtype, name) == expected, (user, host, op, rtype, name)
        # twice: the memoised answer is the same
        assert authz.authorize(sess, op, rtype, name) == expected


@settings(max_examples=100, deadline=None)
@given(
    acls=st.lists(BINDINGS, max_size=10),
    extra=st.lists(BINDINGS, min_size=1, max_size=4),
    queries=st.lists(st.tuples(USERS, HOSTS, OPS, TYPES, NAMES), min_size=1, max_size=6),
)
def test_incremental_changes_match_a_fresh_load(acls, extra, queries):
    authz = StandardAuthorizer(acls={uuid.uuid4(): b for b in acls})
    for user, host, op, rtype, name in queries:  # warm the decision cache
        authz.authorize(session(user, host), op, rtype, name)
    ids = [uuid.uuid4() for _ in extra]
    for acl_id, binding in zip(ids, extra, strict=True):
        authz.add_acl(acl_id, binding)
    authz.remove_acl(ids[0])
    final = list(authz.acls().values())
    for user, host, op, rtype, name in queries:
        expected = reference(final, set(), False, user, host, op, rtype, name)
        assert authz.authorize(session(user, host), op, rtype, name) == expected


def test_a_thousand_acls_index_only_what_applies():
    """1,000 ACLs over many names and prefix lengths: a decision looks at the few ACLs whose
    pattern covers the name, not the whole set."""
    acls = [acl(f"topic-{i}", Op.READ, principal=f"User:u{i}") for i in range(600)]
    acls += [acl(f"team{i}-", Op.WRITE, pattern=PRE) for i in range(300)]
    acls += [acl(f"group-{i}", Op.READ, rtype=RT.GROUP) for i in range(100)]
    authz = StandardAuthorizer(acls=acls)
    index = authz._snapshot.index[RT.TOPIC]
    groups = index.applicable("team12-orders")
    assert sum(len(g) for g in groups) == 1
    assert index.prefix_lengths == (6, 7, 8)  # "teamN-", "teamNN-", "teamNNN-"
    assert authz.authorize(ALICE, Op.WRITE, RT.TOPIC, "team12-orders")
    assert authz.authorize(session("u7"), Op.READ, RT.TOPIC, "topic-7")
    assert not authz.authorize(session("u7"), Op.READ, RT.TOPIC, "topic-8")
