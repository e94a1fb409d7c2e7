"""The rollout planner: surge-first, readiness-gated, halts on a stalled member, rolls back when asked."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from uds_vm_operator.fleet import (
    CreateMember,
    DeleteMember,
    HaltRollout,
    MemberView,
    Rollback,
    RolloutParameters,
    min_ready,
    plan_rollout,
    rollout_complete,
    rollout_parameters,
    seconds_until_next_deadline,
)
from uds_vm_operator.fleet.planner import resolve_int_or_percent


def params(
    replicas: int = 5,
    surge: int | str = 1,
    unavailable: int | str = 0,
    *,
    deadline_s: int = 600,
    rollback: bool = False,
):  # type: ignore[no-untyped-def]
    return rollout_parameters(
        replicas=replicas,
        max_surge=surge,
        max_unavailable=unavailable,
        progress_deadline_s=deadline_s,
        rollback_on_failure=rollback,
    )


def member(
    ordinal: int, revision: str = "new", *, ready: bool = True, age_s: int = 1000, deleting: bool = False
) -> MemberView:
    return MemberView(
        name=f"pool-{ordinal}",
        ordinal=ordinal,
        revision=revision,
        ready=ready,
        created_at=T0 - timedelta(seconds=age_s),
        deleting=deleting,
    )


def plan(p, members, *, target="new", previous=None):  # type: ignore[no-untyped-def]
    return plan_rollout(p, members, target_revision=target, previous_revision=previous, now=T0)


# ------------------------------------------------------------------- a simulated cluster for whole rollouts
# It plays the API server (creates, deletes) and KubeVirt (readiness after a delay), and checks after every
# step the promises the planner makes.
T0 = datetime(2025, 1, 1, tzinfo=UTC)
TICK = timedelta(seconds=10)


@dataclass
class SimMember:
    ordinal: int
    revision: str
    created_tick: int
    ready: bool = False
    deleting: bool = False


@dataclass
class Sim:
    params: RolloutParameters
    target: str
    previous: str | None = None
    ready_delay_ticks: int = 2
    never_ready: set[str] = field(default_factory=set)
    members: dict[int, SimMember] = field(default_factory=dict)
    tick: int = 0
    min_ready_seen: int | None = None
    halts: list[HaltRollout] = field(default_factory=list)
    rollbacks: list[Rollback] = field(default_factory=list)
    created: list[CreateMember] = field(default_factory=list)
    deleted: list[DeleteMember] = field(default_factory=list)

    def add(self, ordinal: int, revision: str, *, ready: bool = True, age_ticks: int = 100) -> None:
        self.members[ordinal] = SimMember(ordinal, revision, self.tick - age_ticks, ready=ready)

    @property
    def now(self) -> datetime:
        return T0 + self.tick * TICK

    def views(self) -> list[MemberView]:
        return [
            MemberView(
                name=f"pool-{m.ordinal}",
                ordinal=m.ordinal,
                revision=m.revision,
                ready=m.ready,
                created_at=T0 + m.created_tick * TICK,
                deleting=m.deleting,
            )
            for m in self.members.values()
        ]

    def ready_count(self) -> int:
        return sum(1 for m in self.members.values() if m.ready and not m.deleting)

    def step(self) -> list[object]:
        """One reconcile: plan, check the plan's promises, apply it; then let time pass one tick."""
        ready_before = self.ready_count()
        total_before = len(self.members)
        actions = plan_rollout(
            self.params,
            self.views(),
            target_revision=self.target,
            previous_revision=self.previous,
            now=self.now,
        )
        for action in actions:
            if isinstance(action, CreateMember):
                assert action.ordinal not in self.members, f"ordinal {action.ordinal} created twice"
                self.members[action.ordinal] = SimMember(action.ordinal, action.revision, self.tick)
                self.created.append(action)
            elif isinstance(action, DeleteMember):
                member = self.members[action.ordinal]
                assert not member.deleting
                member.deleting = True
                self.deleted.append(action)
            elif isinstance(action, HaltRollout):
                self.halts.append(action)
            elif isinstance(action, Rollback):
                self.rollbacks.append(action)
                self.target = action.to_revision
        if any(isinstance(a, HaltRollout) for a in actions):
            assert all(isinstance(a, HaltRollout | Rollback) for a in actions), "a halted plan must not act"
        # Our deletions never push Ready below the floor (or below where it already was).
        assert self.ready_count() >= min(ready_before, min_ready(self.params)), actions
        # Creations never push the pool above replicas + maxSurge (or above where it already was).
        assert len(self.members) <= max(total_before, self.params.replicas + self.params.max_surge), actions
        self._observe()
        self._advance()
        self._observe()
        return list(actions)

    def _observe(self) -> None:
        count = self.ready_count()
        self.min_ready_seen = count if self.min_ready_seen is None else min(self.min_ready_seen, count)

    def _advance(self) -> None:
        self.tick += 1
        for ordinal in [o for o, m in self.members.items() if m.deleting]:
            del self.members[ordinal]
        for member in self.members.values():
            if member.revision in self.never_ready:
                continue
            if self.tick - member.created_tick >= self.ready_delay_ticks:
                member.ready = True

    def complete(self) -> bool:
        return rollout_complete(self.params, self.views(), target_revision=self.target)

    def run(self, max_steps: int = 500) -> int:
        for steps in range(max_steps):
            if self.complete():
                return steps
            self.step()
        raise AssertionError(f"no convergence after {max_steps} steps: {sorted(self.members.items())}")


# ------------------------------------------------------------------------------------------ parameters


@pytest.mark.parametrize(
    ("value", "replicas", "round_up", "expected"),
    [
        (2, 10, True, 2),
        ("25%", 10, True, 3),
        ("25%", 10, False, 2),
        ("100%", 5, False, 5),
        ("0%", 5, True, 0),
    ],
)
def test_percentages_resolve_like_a_deployment(value, replicas, round_up, expected):  # type: ignore[no-untyped-def]
    assert resolve_int_or_percent(value, replicas, round_up=round_up) == expected


def test_zero_surge_and_zero_unavailable_after_rounding_still_moves():
    p = params(replicas=3, surge="0%", unavailable="10%")
    assert (p.max_surge, p.max_unavailable) == (1, 0)


# --------------------------------------------------------------------------------------- single steps


def test_empty_pool_creates_every_ordinal_at_once():
    assert plan(params(replicas=3), []) == [
        CreateMember(0, "new", "ScaleUp"),
        CreateMember(1, "new", "ScaleUp"),
        CreateMember(2, "new", "ScaleUp"),
    ]


def test_converged_pool_has_nothing_to_do():
    assert plan(params(replicas=3), [member(i) for i in range(3)]) == []


def test_template_change_surges_one_member_and_deletes_nothing_yet():
    members = [member(i, "old") for i in range(5)]
    assert plan(params(), members) == [CreateMember(5, "new", "Surge")]


def test_outdated_member_goes_only_after_the_surge_member_is_ready():
    members = [member(i, "old") for i in range(5)] + [member(5, "new", ready=False, age_s=5)]
    assert plan(params(), members) == []
    members[-1] = member(5, "new", ready=True)
    assert plan(params(), members) == [DeleteMember("pool-4", 4, "old", "Outdated", was_ready=True)]


def test_deleted_ordinal_is_reused_in_place_once_it_is_gone():
    members = [member(i, "old") for i in range(4)] + [member(4, "old", deleting=True), member(5)]
    assert plan(params(), members) == []  # 6 members still hold hosts; ordinal 4 is not free yet
    members = [member(i, "old") for i in range(4)] + [member(5)]
    assert plan(params(), members) == [CreateMember(4, "new", "Replace")]


def test_surge_member_leaves_when_every_slot_holds_a_ready_updated_member():
    members = [member(i) for i in range(5)] + [member(5)]
    assert plan(params(), members) == [DeleteMember("pool-5", 5, "new", "ScaleDown", was_ready=True)]


def test_surge_member_stays_while_a_slot_is_still_booting():
    members = [member(i) for i in range(4)] + [member(4, ready=False, age_s=5), member(5)]
    assert plan(params(), members) == []


def test_outdated_members_that_are_not_ready_go_first_and_cost_no_availability():
    members = [member(0, "old"), member(1, "old", ready=False), member(2, "old")]
    actions = plan(params(replicas=3), members)
    assert DeleteMember("pool-1", 1, "old", "Outdated", was_ready=False) in actions
    assert not [a for a in actions if isinstance(a, DeleteMember) and a.was_ready]


def test_max_unavailable_allows_delete_first_in_place_updates_without_surge():
    members = [member(i, "old") for i in range(4)]
    actions = plan(params(replicas=4, surge=0, unavailable=1), members)
    assert actions == [DeleteMember("pool-3", 3, "old", "Outdated", was_ready=True)]


def test_scale_down_removes_the_highest_ordinals():
    members = [member(i) for i in range(5)]
    actions = plan(params(replicas=2), members)
    assert [a.ordinal for a in actions if isinstance(a, DeleteMember)] == [4, 3, 2]
    assert all(isinstance(a, DeleteMember) and a.reason == "ScaleDown" for a in actions)


def test_scale_up_fills_the_lowest_free_ordinals():
    members = [member(0), member(1)]
    assert plan(params(replicas=4), members) == [
        CreateMember(2, "new", "ScaleUp"),
        CreateMember(3, "new", "ScaleUp"),
    ]


def test_scale_down_never_drops_ready_below_the_new_replica_count_while_members_fail():
    members = [member(0, ready=False, age_s=5), member(1), member(2), member(3)]
    actions = plan(params(replicas=2), members)
    deleted_ready = [a for a in actions if isinstance(a, DeleteMember) and a.was_ready]
    assert len(deleted_ready) == 1  # 3 Ready, keep 2
    assert deleted_ready[0].ordinal == 3


# ------------------------------------------------------------------------------------------ deadlines


def test_member_past_the_deadline_halts_without_any_other_action():
    members = [member(i, "old") for i in range(5)] + [member(5, "new", ready=False, age_s=601)]
    assert plan(params(), members) == [HaltRollout("pool-5", "new", waited_s=601, deadline_s=600)]


def test_member_within_the_deadline_does_not_halt():
    members = [member(i, "old") for i in range(5)] + [member(5, "new", ready=False, age_s=600)]
    assert plan(params(), members) == []


def test_halt_with_rollback_returns_to_the_previous_revision():
    members = [member(i, "old") for i in range(5)] + [member(5, "new", ready=False, age_s=700)]
    actions = plan(params(rollback=True), members, previous="old")
    assert actions == [
        HaltRollout("pool-5", "new", 700, 600),
        Rollback(from_revision="new", to_revision="old"),
    ]


def test_no_rollback_without_a_previous_revision():
    actions = plan(params(rollback=True), [member(0, ready=False, age_s=700)], previous=None)
    assert actions == [HaltRollout("pool-0", "new", 700, 600)]


def test_outdated_members_past_the_deadline_do_not_halt():
    members = [member(0, "old", ready=False, age_s=9999), member(1), member(2)]
    actions = plan(params(replicas=3), members)
    assert not [a for a in actions if isinstance(a, HaltRollout)]


def test_halt_message_says_what_to_do():
    halt = HaltRollout("pool-5", "abc", 700, 600)
    assert "pool-5" in halt.message and "spec.template" in halt.message


# ---------------------------------------------------------------------------------------- whole rollouts


def test_five_member_rollout_never_drops_below_five_ready():
    sim = Sim(params(), target="new", ready_delay_ticks=3)
    for i in range(5):
        sim.add(i, "old")
    sim.run()
    assert sim.min_ready_seen == 5
    assert sorted(sim.members) == [0, 1, 2, 3, 4]
    assert {m.revision for m in sim.members.values()} == {"new"}
    assert not sim.halts


def test_ten_member_rollout_with_surge_two_reaches_the_template():
    sim = Sim(params(replicas=10, surge=2), target="new", ready_delay_ticks=2)
    for i in range(10):
        sim.add(i, "old")
    sim.run()
    assert sim.min_ready_seen == 10
    assert max(m.ordinal for m in sim.created) <= 11  # surge ordinals stay just above replicas


def test_stalled_rollout_halts_and_deletes_nothing_more():
    sim = Sim(params(deadline_s=60), target="new", ready_delay_ticks=1, never_ready={"new"})
    for i in range(5):
        sim.add(i, "old")
    for _ in range(30):
        sim.step()
    assert sim.halts
    assert sim.deleted == []  # no outdated member was removed: no new member ever became Ready
    assert len(sim.members) == 6 and sim.ready_count() == 5


def test_stalled_rollout_halts_midway_and_keeps_everything_it_has():
    sim = Sim(params(deadline_s=60), target="new", ready_delay_ticks=1)
    for i in range(5):
        sim.add(i, "old")
    for _ in range(6):
        sim.step()
    sim.never_ready.add("new")  # the image breaks half way (e.g. storage for the clones runs out)
    deleted_before = len(sim.deleted)
    for _ in range(40):
        sim.step()
    assert sim.halts
    assert len(sim.deleted) <= deleted_before + 1  # at most the deletion already under way
    assert sim.min_ready_seen is not None and sim.min_ready_seen >= 4  # the stuck one was counted Ready once


def test_stalled_rollout_with_rollback_returns_every_member_to_the_old_revision():
    sim = Sim(params(deadline_s=60, rollback=True), target="new", previous="old", never_ready={"new"})
    for i in range(5):
        sim.add(i, "old")
    sim.run()
    assert sim.rollbacks == [Rollback("new", "old")]
    assert {m.revision for m in sim.members.values()} == {"old"}
    assert sim.min_ready_seen == 5


def test_scale_five_two_five_brings_back_the_same_ordinals():
    sim = Sim(params(), target="new")
    for i in range(5):
        sim.add(i, "new")
    sim.params = params(replicas=2)
    sim.run()
    assert sorted(sim.members) == [0, 1]
    assert [d.ordinal for d in sim.deleted] == [4, 3, 2]
    sim.params = params(replicas=5)
    sim.run()
    assert sorted(sim.members) == [0, 1, 2, 3, 4]


# ------------------------------------------------------------------------------------------- properties

revisions = st.sampled_from(["old", "mid", "new"])


@st.composite
def pools(draw):  # type: ignore[no-untyped-def]
    replicas = draw(st.integers(0, 7))
    surge = draw(st.integers(0, 3))
    unavailable = draw(st.integers(0 if surge else 1, 3))
    ordinals = draw(st.sets(st.integers(0, 10), max_size=9))
    initial = [(o, draw(revisions), draw(st.booleans())) for o in sorted(ordinals)]
    delay = draw(st.integers(0, 4))
    return replicas, surge, unavailable, initial, delay


@settings(max_examples=300, deadline=None)
@given(pools())
def test_any_pool_converges_without_breaking_the_availability_floor(pool):  # type: ignore[no-untyped-def]
    replicas, surge, unavailable, initial, delay = pool
    sim = Sim(params(replicas, surge, unavailable, deadline_s=10_000), target="new", ready_delay_ticks=delay)
    for ordinal, revision, ready in initial:
        sim.add(ordinal, revision, ready=ready, age_ticks=0)
    sim.run()  # Sim.step asserts the floor and the surge bound after every plan
    assert sorted(sim.members) == list(range(replicas))
    assert all(m.revision == "new" and m.ready for m in sim.members.values())


@settings(max_examples=200, deadline=None)
@given(pools())
def test_plans_are_deterministic(pool):  # type: ignore[no-untyped-def]
    replicas, surge, unavailable, initial, _ = pool
    members = [member(o, r, ready=ready) for o, r, ready in initial]
    p = params(replicas, surge, unavailable)
    assert plan(p, members) == plan(p, list(reversed(members)))


def test_tick_length_is_below_the_deadlines_used():
    assert timedelta(seconds=60) > TICK


@settings(max_examples=200, deadline=None)
@given(pools())
def test_any_stalled_rollout_rolls_back_to_the_old_revision(pool):  # type: ignore[no-untyped-def]
    replicas, surge, unavailable, initial, delay = pool
    sim = Sim(
        params(replicas, surge, unavailable, deadline_s=60, rollback=True),
        target="new",
        previous="old",
        ready_delay_ticks=min(delay, 3),
        never_ready={"new"},
    )
    for ordinal, revision, ready in initial:
        sim.add(ordinal, "mid" if revision == "new" else revision, ready=ready, age_ticks=0)
    sim.run()
    assert sim.target == ("old" if replicas else "new")  # an empty pool has nothing to stall on
    assert all(m.revision == "old" and m.ready for m in sim.members.values())
    assert len(sim.rollbacks) <= 1


def test_next_deadline_is_the_earliest_waiting_member():
    p = params(deadline_s=600)
    members = [
        member(0, ready=False, age_s=100),
        member(1, ready=False, age_s=500),
        member(2),
        member(3, "old", ready=False),
    ]
    assert seconds_until_next_deadline(p, members, target_revision="new", now=T0) == 100
    assert seconds_until_next_deadline(p, [member(0)], target_revision="new", now=T0) is None
    assert (
        seconds_until_next_deadline(p, [member(0, ready=False, age_s=900)], target_revision="new", now=T0)
        is None
    )


def test_deadline_and_recheck_agree_on_fractions_of_a_second():
    p = params(deadline_s=5)
    late = MemberView("pool-0", 0, "new", False, T0 - timedelta(seconds=5.3))
    assert seconds_until_next_deadline(p, [late], target_revision="new", now=T0) is None
    assert plan(p, [late]) == [HaltRollout("pool-0", "new", waited_s=5, deadline_s=5)]


def test_a_failed_member_halts_at_once_without_waiting_for_the_deadline():
    failed = MemberView("pool-5", 5, "new", ready=False, created_at=T0 - timedelta(seconds=3), failed=True)
    members = [member(i, "old") for i in range(5)] + [failed]
    actions = plan(params(rollback=True), members, previous="old")
    assert actions == [HaltRollout("pool-5", "new", 3, 600, failed=True), Rollback("new", "old")]
    assert "failed" in actions[0].message  # type: ignore[union-attr]


def test_a_failed_outdated_member_is_simply_replaced():
    failed_old = MemberView("pool-0", 0, "old", ready=False, created_at=T0, failed=True)
    actions = plan(params(replicas=2), [failed_old, member(1)])
    assert DeleteMember("pool-0", 0, "old", "Outdated", was_ready=False) in actions
