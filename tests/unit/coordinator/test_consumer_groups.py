"""KIP-848 consumer groups on the sans-IO coordinator: server-side assignment, incremental
reconciliation (revoke first, then receive), epochs and fencing, leave and session expiry,
restart, and coexistence with classic groups."""

from __future__ import annotations

from sparklog.coordinator.group.consumer_group import ConsumerMember, assign

from .harness import Harness, consumer_heartbeat

NONE, UNKNOWN_MEMBER, INCONSISTENT_PROTOCOL, GROUP_ID_NOT_FOUND = 0, 25, 23, 69
FENCED_MEMBER_EPOCH, UNSUPPORTED_ASSIGNOR, STALE_MEMBER_EPOCH = 110, 112, 113


class Member:
    """A client that reconciles like a real one: it owns what the last answer assigned."""

    def __init__(self, h: Harness, member_id: str, group: str = "cg", **kw) -> None:
        self.h, self.member_id, self.group, self.kw = h, member_id, group, kw
        self.epoch, self.owned = 0, {}

    def beat(self, **extra) -> dict:
        kw = {**self.kw, **extra}
        if self.epoch != 0:
            kw.pop("topics", None)  # unchanged subscription: not resent
        answer = consumer_heartbeat(
            self.h, self.member_id, self.epoch, self.group, owned=self.owned, **kw
        )
        if answer["error_code"] == NONE:
            self.epoch = answer["member_epoch"]
            if answer["assignment"] is not None:
                self.owned = {t: set(ps) for t, ps in answer["assignment"].items()}
        return answer

    def count(self) -> int:
        return sum(len(ps) for ps in self.owned.values())


def settle(*members: Member, rounds: int = 6) -> None:
    for _ in range(rounds):
        for m in members:
            assert m.beat()["error_code"] == NONE


def owned_partitions(*members: Member) -> list[tuple[str, int]]:
    return sorted((t, p) for m in members for t, ps in m.owned.items() for p in ps)


def test_three_members_split_the_partitions_without_overlap():
    h = Harness()
    members = [Member(h, f"m{i}", topics=["t"]) for i in range(3)]
    settle(*members)
    assert [m.count() for m in members] == [2, 2, 2]
    assert owned_partitions(*members) == [("t", p) for p in range(6)]
    group = h.core.groups["cg"]
    assert {m.epoch for m in members} == {group.assignment_epoch}
    assert h.state("cg") == "Stable"
    listed = h.core.list_groups(types={"consumer"})
    assert [(g["group_id"], g["group_type"]) for g in listed] == [("cg", "consumer")]


def test_a_joiner_waits_until_the_owner_revoked_then_receives():
    h = Harness()
    a = Member(h, "a", topics=["t"])
    settle(a)
    assert a.count() == 6
    b = Member(h, "b", topics=["t"])
    first = b.beat()
    assert first["assignment"] == {} and b.count() == 0  # a still holds everything
    answer = a.beat()  # a is told to keep three, its epoch unchanged until it let go
    assert a.count() == 3 and answer["member_epoch"] < h.core.groups["cg"].assignment_epoch
    a.beat()  # reports owning three: revocation done, a moves to the target epoch
    assert a.epoch == h.core.groups["cg"].assignment_epoch
    b.beat()
    assert b.count() == 3 and owned_partitions(a, b) == [("t", p) for p in range(6)]
    assert h.state("cg") == "Stable"


def test_epoch_and_membership_errors():
    h = Harness()
    a = Member(h, "a", topics=["t"])
    settle(a)
    assert consumer_heartbeat(h, "a", a.epoch + 5)["error_code"] == FENCED_MEMBER_EPOCH
    assert consumer_heartbeat(h, "ghost", 3)["error_code"] == UNKNOWN_MEMBER
    assert consumer_heartbeat(h, "x", 0, topics=["t"], assignor="sticky")["error_code"] == (
        UNSUPPORTED_ASSIGNOR
    )


def test_leave_and_session_expiry_move_partitions():
    h = Harness(group_consumer_session_timeout_ms=10_000)
    a, b, c = (Member(h, n, topics=["t"]) for n in "abc")
    settle(a, b, c)
    assert consumer_heartbeat(h, "c", -1)["member_epoch"] == -1
    settle(a, b)
    assert [a.count(), b.count()] == [3, 3]
    for _ in range(3):
        h.advance(4_000)
        a.beat()  # b stays silent
    settle(a)
    assert a.count() == 6 and list(h.core.groups["cg"].members) == ["a"]


def test_range_assignor_gives_contiguous_ranges_per_topic():
    members = {
        n: ConsumerMember(n, None, None, "c", "h", ["t", "u"], None, "range", 1000) for n in "ab"
    }
    target = assign("range", members, {"t": 6, "u": 2}, {})
    assert target == {"a": {"t": {0, 1, 2}, "u": {0}}, "b": {"t": {3, 4, 5}, "u": {1}}}
    sticky = assign("uniform", members, {"t": 6, "u": 2}, {"a": {"t": {5, 4, 3, 2}}})
    assert sticky["a"]["t"] >= {2, 3, 4} and sum(len(v) for v in sticky["b"].values()) == 4


def test_member_epoch_commits_and_restart():
    h = Harness()
    a = Member(h, "a", topics=["t"])
    settle(a)
    assert h.commit({("t", 0): 7}, group="cg", member_id="a", generation=a.epoch) == {
        ("t", 0): NONE
    }
    assert h.commit({("t", 0): 8}, group="cg", member_id="a", generation=a.epoch - 1) == {
        ("t", 0): STALE_MEMBER_EPOCH
    }
    h.restart()
    assert a.beat()["error_code"] == NONE and a.count() == 6
    assert h.committed("cg") == {("t", 0): 7}


def test_classic_and_consumer_groups_keep_to_their_protocol():
    h = Harness()
    settle(Member(h, "a", topics=["t"]))
    assert h.join(group="cg").value["error_code"] == INCONSISTENT_PROTOCOL
    first = h.join_new(group="classic")
    assert first.value["error_code"] == NONE
    refused = consumer_heartbeat(h, "x", 0, group="classic", topics=["t"])
    assert refused["error_code"] == GROUP_ID_NOT_FOUND
    h.commit({("t", 0): 1}, group="offsets-only")  # an empty classic group becomes a consumer one
    assert consumer_heartbeat(h, "y", 0, group="offsets-only", topics=["t"])["error_code"] == NONE
    assert h.committed("offsets-only") == {("t", 0): 1}
