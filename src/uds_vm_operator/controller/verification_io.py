"""The I/O around :mod:`controller.verification`: read what the decision needs, carry out its actions.

Kept apart from the pure decision so the reconciler gains exactly two calls: :func:`observe_verification`
before it renders the VM (the verdict decides ``runStrategy``) and :func:`execute_verification` right after,
before any child is applied, so a VM is never set to run ahead of a recorded verdict.

API cost in the steady state: nothing for VMs without a declared digest; for verified VMs the verdict is
read from the DataVolume the reconciler already holds, so no extra request is made (the image record is
read only while the disk is unverified).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Mapping
from typing import Any

from uds_vm_operator.api.backup import RESTORED_FROM_ANNOTATION
from uds_vm_operator.api.errors import SpecError
from uds_vm_operator.api.models import UDSVirtualMachineSpec
from uds_vm_operator.controller.verification import (
    VERIFIER_FIELD_MANAGER,
    ApplyVerifier,
    DeleteVerifierPod,
    ImageRecordError,
    RecordVerdict,
    VerificationInput,
    VerificationOutcome,
    decide,
    image_record_name,
    parse_image_record,
)
from uds_vm_operator.render.common import ClusterFacts, Owner
from uds_vm_operator.render.verifier import verifier_pod_name
from uds_vm_operator.render.verifier_resources import (
    SETTING,
    Resources,
    default_resources,
    verifier_resources,
)
from uds_vm_operator.runtime import kube

log = logging.getLogger(__name__)

POD = kube.POD
CONFIG_MAP = kube.CONFIG_MAP
VERIFIER_IMAGE_ENV = "UDS_VM_OPERATOR_IMAGE"
"""The operator's own image, which the verifier pod runs (set by the Deployment / Helm chart)."""


VERIFIER_RESOURCES_ENV = "UDS_VM_VERIFIER_RESOURCES"
"""The verifier pod's requests and limits as JSON (chart value ``verifier.resources``); unset: defaults."""


def verifier_image_from_env() -> str | None:
    """The image for verifier pods, or None when the operator was not told its own image."""
    value = os.environ.get(VERIFIER_IMAGE_ENV, "").strip()
    return value or None


def verifier_resources_from_env(environ: Mapping[str, str] | None = None) -> Resources:
    """The verifier pod's requests and limits: the defaults with the site's overrides laid over them.

    Read once at start-up; a value Kubernetes would refuse raises :class:`SpecError` naming the chart value,
    so the operator stops with that one line instead of failing every verification later."""
    raw = (environ if environ is not None else os.environ).get(VERIFIER_RESOURCES_ENV, "").strip()
    if not raw:
        return default_resources()
    try:
        overrides = json.loads(raw)
    except ValueError as exc:
        raise SpecError(f"{SETTING}: not JSON ({exc}); the chart writes it with toJson") from exc
    if not isinstance(overrides, dict):
        raise SpecError(f"{SETTING}: expected an object with requests and/or limits, got {raw[:80]!r}")
    return verifier_resources(overrides)


async def observe_verification(
    api: kube.KubeApi,
    owner: Owner,
    *,
    owner_body: Mapping[str, Any],
    spec: UDSVirtualMachineSpec,
    facts: ClusterFacts,
    datavolume: Mapping[str, Any] | None,
    verifier_image: str | None,
    verifier_resources: Resources | None = None,
) -> VerificationOutcome:
    """Gather the inputs (image record, verifier pod) and decide; reads only what the decision needs."""
    record_name = image_record_name(owner_body)
    inputs = VerificationInput(
        owner=owner,
        source_kind=spec.source.kind,
        declared_checksum=spec.declared_checksum,
        virtual_size_bytes=spec.disk.virtual_bytes,
        volume_mode=spec.disk.volume_mode,
        cdi_http_checksum=facts.cdi_http_checksum,
        datavolume=datavolume,
        image_record_name=record_name,
        verifier_image=verifier_image,
        verifier_resources=verifier_resources,
        restored_from=((owner_body.get("metadata") or {}).get("annotations") or {}).get(
            RESTORED_FROM_ANNOTATION
        ),
    )
    if spec.declared_checksum is None:
        return decide(inputs)
    if record_name is not None:
        inputs = await _with_image_record(api, inputs, owner.namespace, record_name)
    first = decide(inputs)
    if not any(isinstance(action, ApplyVerifier) for action in first.actions):
        return first  # decided from the DataVolume alone (verified, mismatch, waiting): no pod read needed
    pod = await api.get(POD, owner.namespace, verifier_pod_name(owner.name))
    return decide(_replace(inputs, verifier_pod=pod))


async def execute_verification(api: kube.KubeApi, namespace: str, outcome: VerificationOutcome) -> int:
    """Carry out the decided actions in order; return the number of API writes."""
    writes = 0
    for action in outcome.actions:
        if isinstance(action, ApplyVerifier):
            for manifest in action.manifests:
                await api.apply(manifest)
                writes += 1
        elif isinstance(action, RecordVerdict):
            metadata: dict[str, Any] = {"annotations": action.annotations}
            if action.uid:
                metadata["uid"] = action.uid  # never annotate a newer disk of the same name
            await api.merge_patch(
                kube.DATA_VOLUME,
                namespace,
                action.datavolume,
                {"metadata": metadata},
                field_manager=VERIFIER_FIELD_MANAGER,
            )
            writes += 1
        elif isinstance(action, DeleteVerifierPod):
            await api.delete(POD, namespace, action.name, uid=action.uid)
            writes += 1
        log.info("verification", extra={"namespace": namespace, "action": type(action).__name__})
    return writes


async def _with_image_record(
    api: kube.KubeApi, inputs: VerificationInput, namespace: str, record_name: str
) -> VerificationInput:
    configmap = await api.get(CONFIG_MAP, namespace, record_name)
    if configmap is None:
        return _replace(inputs, image_record_missing=True)
    try:
        return _replace(inputs, image_record=parse_image_record(configmap))
    except ImageRecordError as exc:
        return _replace(inputs, image_record_problem=str(exc))


def _replace(inputs: VerificationInput, **changes: Any) -> VerificationInput:
    return dataclasses.replace(inputs, **changes)
