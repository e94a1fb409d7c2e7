"""Fleets of UDSVirtualMachines: revision hashes, member manifests, the rollout planner and pool status.

Everything in this package is pure: the pool controller (``controller/pool.py``) reads the cluster, asks
these functions what to do, and carries it out.
"""

from uds_vm_operator.fleet.actions import Action, CreateMember, DeleteMember, HaltRollout, Rollback
from uds_vm_operator.fleet.members import (
    ORDINAL_LABEL,
    REVISION_LABEL,
    MemberView,
    PoolRef,
    member_name,
    member_view,
    ordinal_of,
    render_member,
    windows_computer_name,
)
from uds_vm_operator.fleet.planner import (
    RolloutParameters,
    min_ready,
    parameters_of,
    plan_rollout,
    rollout_complete,
    rollout_parameters,
    seconds_until_next_deadline,
)
from uds_vm_operator.fleet.revision import revision_hash
from uds_vm_operator.fleet.status import (
    MemberCounts,
    Revisions,
    count_members,
    pool_status,
    resolve_revisions,
)
from uds_vm_operator.render.common import POOL_LABEL

__all__ = [
    "ORDINAL_LABEL",
    "POOL_LABEL",
    "REVISION_LABEL",
    "Action",
    "CreateMember",
    "DeleteMember",
    "HaltRollout",
    "MemberCounts",
    "MemberView",
    "PoolRef",
    "Revisions",
    "Rollback",
    "RolloutParameters",
    "count_members",
    "member_name",
    "member_view",
    "min_ready",
    "ordinal_of",
    "parameters_of",
    "plan_rollout",
    "pool_status",
    "render_member",
    "resolve_revisions",
    "revision_hash",
    "rollout_complete",
    "rollout_parameters",
    "seconds_until_next_deadline",
    "windows_computer_name",
]
