"""The root DataVolume ``<name>-dv`` (``cdi.kubevirt.io/v1beta1``), standalone, not a dataVolumeTemplate.

Why ``spec.pvc`` and not ``spec.storage``: CDI inflates a ``spec.storage`` request by the filesystem overhead
of the storage class (``GetRequiredSpace``: ``ceil(roundup(req, 1Mi) * (1 + o))``), while ``spec.pvc`` is
passed to the PVC verbatim. We already add the overhead ourselves (SPEC §4, ``sizing.pvc_size``), so
``spec.pvc`` with explicit ``accessModes`` and ``volumeMode`` yields a PVC of exactly the size printed by
``uds-vmctl prep``, never inflated twice. The one exception is a clone without a declared size: only
``spec.storage`` lets CDI infer the size from the source volume, and there is no overhead for us to double.

Why standalone: KubeVirt's VM CRD embeds its own, older copy of the DataVolume schema, which may prune
``source.http.checksum``; a standalone DataVolume is validated by CDI's own CRD.

Why ``bind.immediate.requested`` on every DataVolume: the VM stays ``Halted`` until the digest is verified, so
nothing would ever consume a WaitForFirstConsumer volume and the import would never start.
"""

from __future__ import annotations

from typing import Any

from uds_vm_operator.api.errors import SpecError
from uds_vm_operator.api.models import ObjectRef, UDSVirtualMachineSpec
from uds_vm_operator.api.quantity import parse_bytes
from uds_vm_operator.apiversions import CDI_API_VERSION
from uds_vm_operator.child_names import drivers_dv_name, root_dv_name, system_dv_name
from uds_vm_operator.render.common import ROLE_LABEL, ClusterFacts, Owner, child_metadata
from uds_vm_operator.render.datadisks import backup_labels
from uds_vm_operator.sizing import pvc_size

BIND_IMMEDIATE_ANNOTATION = "cdi.kubevirt.io/storage.bind.immediate.requested"
DEFAULT_ACCESS_MODES = ("ReadWriteOnce",)


def expected_pvc_size(spec: UDSVirtualMachineSpec) -> str | None:
    """The exact PVC size of ``<name>-dv`` (e.g. ``11Mi``), or None when CDI infers it from a clone source."""
    virtual_bytes = spec.disk.virtual_bytes
    if virtual_bytes is None:
        return None
    return pvc_size(virtual_bytes, spec.disk.overhead_percent)


def root_access_modes(spec: UDSVirtualMachineSpec) -> list[str]:
    """Access modes of the root disk (ReadWriteOnce unless declared)."""
    return list(spec.disk.access_modes or DEFAULT_ACCESS_MODES)


def _cdi_source(owner: Owner, spec: UDSVirtualMachineSpec, facts: ClusterFacts) -> dict[str, Any]:
    """Map ``spec.source`` onto CDI's ``spec.source`` / ``spec.sourceRef`` (one key of the returned dict)."""
    source = spec.source
    if source.upload is not None:
        # CDI has no upload checksum (issue #4104): never emit one; the operator verifies uploads itself.
        return {"source": {"upload": {}}}
    remote = _remote_source(spec, facts)
    if remote is not None:
        return {"source": remote}
    if source.pvc is not None:
        return {"source": {"pvc": _namespaced(source.pvc, owner)}}
    if source.data_source is not None:
        return {"sourceRef": {"kind": "DataSource", **_namespaced(source.data_source, owner)}}
    if source.blank is not None:
        return {"source": {"blank": {}}}
    raise SpecError(
        f"spec.source.{source.kind}: this source kind cannot be rendered; use one of upload, http, ..."
    )


def _remote_source(spec: UDSVirtualMachineSpec, facts: ClusterFacts) -> dict[str, Any] | None:
    """CDI's ``spec.source`` for an image CDI fetches itself (http, s3, registry); None for the others."""
    source = spec.source
    if source.http is not None:
        http: dict[str, Any] = {"url": source.http.url}
        if source.http.secret_ref:
            http["secretRef"] = source.http.secret_ref
        if source.http.cert_config_map:
            http["certConfigMap"] = source.http.cert_config_map
        if source.http.checksum and facts.cdi_http_checksum:
            http["checksum"] = source.http.checksum
        return {"http": http}
    if source.s3 is not None:
        s3: dict[str, Any] = {"url": source.s3.url}
        if source.s3.secret_ref:
            s3["secretRef"] = source.s3.secret_ref
        return {"s3": s3}
    if source.registry is not None:
        return {"registry": {"url": source.registry.url, "pullMethod": source.registry.pull_method}}
    return None


def _namespaced(ref: ObjectRef, owner: Owner) -> dict[str, str]:
    return {"name": ref.name, "namespace": ref.namespace or owner.namespace}


def exact_pvc(
    size: str, access_modes: list[str], volume_mode: str, storage_class: str | None
) -> dict[str, Any]:
    """A ``spec.pvc`` block: passed to the PVC verbatim, so the size stays exactly ``size``."""
    pvc: dict[str, Any] = {
        "accessModes": access_modes,
        "volumeMode": volume_mode,
        "resources": {"requests": {"storage": size}},
    }
    if storage_class:
        pvc["storageClassName"] = storage_class
    return pvc


def _inferred_storage(access_modes: list[str], volume_mode: str, storage_class: str | None) -> dict[str, Any]:
    """A ``spec.storage`` block without a size: CDI takes the size of the clone source.

    ``accessModes`` always: CDI fills missing ones from the class's StorageProfile, and a profile with no
    claim property sets (every ``kubernetes.io/no-provisioner`` class) has none, so CDI would fail the clone
    with "no matching accessMode specified in StorageProfile".
    """
    storage: dict[str, Any] = {"volumeMode": volume_mode, "accessModes": access_modes}
    if storage_class:
        storage["storageClassName"] = storage_class
    return storage


def _datavolume(owner: Owner, name: str, spec_body: dict[str, Any], role: str) -> dict[str, Any]:
    return {
        "apiVersion": CDI_API_VERSION,
        "kind": "DataVolume",
        "metadata": child_metadata(
            owner,
            name,
            # Driver media are replaceable; every disk that holds guest state is backed up by default.
            labels={ROLE_LABEL: role, **(backup_labels(True) if role != "driver-media" else {})},
            annotations={BIND_IMMEDIATE_ANNOTATION: "true"},
        ),
        "spec": spec_body,
    }


def render_root_datavolume(owner: Owner, spec: UDSVirtualMachineSpec, facts: ClusterFacts) -> dict[str, Any]:
    """The DataVolume ``<name>-dv`` importing ``spec.source`` (in Windows ``iso`` mode: the installer ISO)."""
    body = _cdi_source(owner, spec, facts)
    size = expected_pvc_size(spec)
    if size is not None:
        body["pvc"] = exact_pvc(
            size, root_access_modes(spec), spec.disk.volume_mode, spec.disk.storage_class_name
        )
    elif spec.source.is_clone:
        body["storage"] = _inferred_storage(
            root_access_modes(spec), spec.disk.volume_mode, spec.disk.storage_class_name
        )
    else:
        raise SpecError(
            f"spec.disk.virtualSize is required for source {spec.source.kind}; "
            "run `uds-vmctl prep IMAGE` and copy the virtual size it prints"
        )
    return _datavolume(owner, root_dv_name(owner.name), body, "root-disk")


def render_system_datavolume(owner: Owner, spec: UDSVirtualMachineSpec) -> dict[str, Any]:
    """The blank DataVolume ``<name>-system`` a Windows ``iso`` installation writes to.

    Sized like every disk (``pvc_size`` of ``windows.systemDiskSize``) so the virtual disk CDI creates inside
    the filesystem volume gets the full declared size.
    """
    if spec.windows is None:
        raise SpecError("spec.windows is required for a Windows system disk")
    virtual_bytes = parse_bytes(spec.windows.system_disk_size, field="spec.windows.systemDiskSize")
    body: dict[str, Any] = {
        "source": {"blank": {}},
        "pvc": exact_pvc(
            pvc_size(virtual_bytes, spec.disk.overhead_percent),
            root_access_modes(spec),
            spec.disk.volume_mode,
            spec.disk.storage_class_name,
        ),
    }
    return _datavolume(owner, system_dv_name(owner.name), body, "system-disk")


def render_drivers_datavolume(owner: Owner, spec: UDSVirtualMachineSpec) -> dict[str, Any] | None:
    """A clone ``<name>-drivers`` of the virtio-win DataSource; None when the media is a PVC or absent."""
    if spec.windows is None or spec.windows.driver_media is None:
        return None
    media = spec.windows.driver_media.data_source
    if media is None:
        return None
    body: dict[str, Any] = {
        "sourceRef": {"kind": "DataSource", **_namespaced(media, owner)},
        "storage": _inferred_storage(root_access_modes(spec), "Filesystem", spec.disk.storage_class_name),
    }
    return _datavolume(owner, drivers_dv_name(owner.name), body, "driver-media")
