"""The one condition type and the one place a transition time is stamped."""

from __future__ import annotations

from datetime import UTC, datetime

from uds_vm_operator.controller.status import Observation, derive_status
from uds_vm_operator.fleet.status import condition, merge_conditions
from uds_vm_operator.runtime.conditions import Condition, by_type, stamp, transition_time

EARLIER = "2026-01-01T00:00:00Z"
NOW = "2026-01-02T00:00:00Z"


def test_a_condition_reads_by_name_and_still_compares_as_its_triple() -> None:
    cond = Condition("False", "NoKVM", "no node has KVM")
    assert (cond.status, cond.reason, cond.message) == ("False", "NoKVM", "no node has KVM")
    assert cond == ("False", "NoKVM", "no node has KVM")
    assert cond.is_false and not cond.is_true
    unknown = Condition("Unknown", "InvalidSpec", "not evaluated")
    assert not unknown.is_true and not unknown.is_false


def test_an_unchanged_status_keeps_its_transition_time() -> None:
    previous = {"type": "Ready", "status": "False", "lastTransitionTime": EARLIER}
    assert transition_time("False", previous, NOW) == EARLIER
    assert transition_time("True", previous, NOW) == NOW
    assert transition_time("False", {"status": "False"}, NOW) == NOW
    assert transition_time("False", None, NOW) == NOW


def test_stamp_writes_the_stored_shape() -> None:
    entry = stamp("Ready", Condition("True", "Running", "up"), None, now=NOW, generation=3)
    assert entry == {
        "type": "Ready",
        "status": "True",
        "reason": "Running",
        "message": "up",
        "lastTransitionTime": NOW,
        "observedGeneration": 3,
    }
    assert "observedGeneration" not in stamp(
        "Ready", Condition("True", "R", "m"), None, now=NOW, generation=None
    )


def test_by_type_ignores_what_is_not_a_condition() -> None:
    stored = [{"type": "Ready", "status": "True"}, "junk", {"status": "False"}, None]
    assert set(by_type(stored)) == {"Ready"}
    assert by_type(None) == {}


def test_the_vm_and_the_pool_status_keep_transition_times_the_same_way() -> None:
    """Both controllers' publish steps go through the same rule: a resync stamps nothing new."""
    vm_first = derive_status(Observation(generation=1), None, EARLIER)
    vm_again = derive_status(Observation(generation=1), vm_first, NOW)
    assert [c["lastTransitionTime"] for c in vm_again["conditions"]] == [EARLIER] * len(
        vm_first["conditions"]
    )

    then, later = datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC)
    pool_first = [condition("Available", True, "Enough", "3 of 3", now=then, generation=1)]
    pool_again = merge_conditions(
        pool_first, [condition("Available", True, "Enough", "3 of 3", now=later, generation=1)]
    )
    assert pool_again == pool_first
    flipped = merge_conditions(
        pool_first, [condition("Available", False, "TooFew", "1 of 3", now=later, generation=1)]
    )
    assert flipped[0]["lastTransitionTime"] == "2026-01-02T00:00:00Z"
