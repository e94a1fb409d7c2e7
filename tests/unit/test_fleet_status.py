"""Pool status: counts, revisions, rollback bookkeeping and conditions that do not churn."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from uds_vm_operator.fleet import (
    HaltRollout,
    MemberView,
    count_members,
    pool_status,
    resolve_revisions,
    rollout_parameters,
)

NOW = datetime(2025, 5, 1, 12, 0, tzinfo=UTC)
PARAMS = rollout_parameters(
    replicas=3, max_surge=1, max_unavailable=0, progress_deadline_s=600, rollback_on_failure=True
)


def m(ordinal: int, revision: str, *, ready: bool = True, deleting: bool = False) -> MemberView:
    return MemberView(f"web-{ordinal}", ordinal, revision, ready, NOW - timedelta(hours=1), deleting)


def conditions(status):  # type: ignore[no-untyped-def]
    return {c["type"]: c for c in status["conditions"]}


def test_counts_ignore_members_being_deleted():
    counts = count_members(3, [m(0, "b"), m(1, "a"), m(2, "a", ready=False), m(3, "a", deleting=True)], "b")
    assert counts.as_states() == {"desired": 3, "active": 3, "ready": 2, "updated": 1, "outdated": 2}


def test_revisions_follow_the_template_normally():
    r = resolve_revisions("b", {"currentRevision": "a"})
    assert (r.target, r.current, r.failed, r.rolled_back) == ("b", "a", None, False)


def test_a_failed_template_revision_is_not_retried():
    r = resolve_revisions("b", {"currentRevision": "a", "failedRevision": "b"})
    assert (r.target, r.rolled_back) == ("a", True)


def test_a_new_template_after_a_rollback_rolls_out_again():
    r = resolve_revisions("c", {"currentRevision": "a", "failedRevision": "b"})
    assert (r.target, r.failed, r.rolled_back) == ("c", None, False)


def test_status_of_a_rollout_in_progress():
    members = [m(0, "a"), m(1, "a"), m(2, "b"), m(3, "b", ready=False)]
    status = pool_status(
        pool_name="web",
        params=PARAMS,
        members=members,
        revisions=resolve_revisions("b", {"currentRevision": "a"}),
        halt=None,
        previous=None,
        generation=4,
        now=NOW,
    )
    assert status["replicas"] == 4 and status["readyReplicas"] == 3
    assert (status["updatedReplicas"], status["outdatedReplicas"]) == (2, 2)
    assert (status["currentRevision"], status["updateRevision"]) == ("a", "b")
    assert status["labelSelector"] == "uds.dev/pool=web"
    assert status["observedGeneration"] == 4
    cond = conditions(status)
    assert (cond["Ready"]["status"], cond["Ready"]["reason"]) == ("False", "RollingUpdate")
    assert cond["Available"]["status"] == "True"
    assert cond["RolloutStalled"]["status"] == "False"


def test_completion_advances_the_current_revision():
    members = [m(0, "b"), m(1, "b"), m(2, "b")]
    status = pool_status(
        pool_name="web",
        params=PARAMS,
        members=members,
        revisions=resolve_revisions("b", {"currentRevision": "a"}),
        halt=None,
        previous=None,
        generation=1,
        now=NOW,
    )
    assert status["currentRevision"] == "b"
    assert conditions(status)["Ready"]["reason"] == "RolloutComplete"


def test_stall_and_rollback_are_reported_with_what_to_do():
    halt = HaltRollout("web-3", "b", 700, 600)
    revisions = resolve_revisions("b", {"currentRevision": "a", "failedRevision": "b"})
    status = pool_status(
        pool_name="web",
        params=PARAMS,
        members=[m(0, "a")],
        revisions=revisions,
        halt=halt,
        previous=None,
        generation=2,
        now=NOW,
    )
    cond = conditions(status)
    assert (cond["RolloutStalled"]["status"], cond["RolloutStalled"]["reason"]) == (
        "True",
        "ProgressDeadlineExceeded",
    )
    assert "web-3" in cond["RolloutStalled"]["message"]
    assert cond["RolledBack"]["status"] == "True" and "spec.template" in cond["RolledBack"]["message"]
    assert status["failedRevision"] == "b" and status["updateRevision"] == "a"
    assert cond["Available"]["status"] == "False"


def test_unchanged_conditions_keep_their_transition_time():
    members = [m(0, "b"), m(1, "b"), m(2, "b")]
    first = pool_status(
        pool_name="web",
        params=PARAMS,
        members=members,
        revisions=resolve_revisions("b", None),
        halt=None,
        previous=None,
        generation=1,
        now=NOW,
    )
    later = pool_status(
        pool_name="web",
        params=PARAMS,
        members=members,
        revisions=resolve_revisions("b", first),
        halt=None,
        previous=first,
        generation=1,
        now=NOW + timedelta(minutes=5),
    )
    assert later == first
    broken = [m(0, "b"), m(1, "b"), m(2, "b", ready=False)]
    after = pool_status(
        pool_name="web",
        params=PARAMS,
        members=broken,
        revisions=resolve_revisions("b", first),
        halt=None,
        previous=first,
        generation=1,
        now=NOW + timedelta(minutes=9),
    )
    assert conditions(after)["Ready"]["lastTransitionTime"] == "2025-05-01T12:09:00Z"
    assert conditions(after)["RolledBack"]["lastTransitionTime"] == "2025-05-01T12:00:00Z"
