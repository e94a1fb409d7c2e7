"""``network.mode: uds-package``: keep each VM's rules merged into its namespace's UDS ``Package``.

UDS Core allows one ``Package`` (``uds.dev/v1alpha1``) per namespace, so the Package is shared: by every VM
of the namespace and possibly by the application team. It is therefore never owned by one VM (no
ownerReference: garbage collection would delete everybody's rules with the first VM). Instead:

- Rules carry a per-VM tag in ``description`` (``uds-vm:<name>:``, see :mod:`render.udspackage`); a merge
  replaces exactly one VM's rules and never touches anybody else's.
- The Package in the namespace is reused when there is one (whatever its name); otherwise the operator
  creates ``uds-vms``, labelled as ours, and deletes it again when the last VM rule leaves it.
- Read-modify-write is serialised per namespace inside the operator (an ``asyncio.Lock``) and guarded
  against other writers by ``metadata.resourceVersion`` in the merge patch: a concurrent change answers
  409 Conflict, and the write is retried on the fresh object.
- Removal on deletion without a finalizer: the reconcile of a VM that is gone removes its rules, and every
  sync also prunes rules of VMs that no longer exist (confirmed by a GET, not by the cache), which covers
  VMs deleted while the operator was down. A finalizer would do the same but block namespace deletion
  whenever the operator is absent or uninstalled, and writes to every uds-package VM object.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from uds_vm_operator import MANAGED_BY_LABEL
from uds_vm_operator.render.udspackage import (
    PACKAGE_API_VERSION,
    PACKAGE_KIND,
    RULE_SECTIONS,
    merge_package,
    mesh_mode,
    package_supports_kubevirt,
    remove_vm_from_package,
    with_kubevirt_enabled,
)
from uds_vm_operator.runtime import kube
from uds_vm_operator.runtime.conditions import Condition
from uds_vm_operator.runtime.errors import KubeApiError

log = logging.getLogger("uds_vm_operator.udspackage")

PACKAGE = kube.register_kind(kube.Kind(PACKAGE_API_VERSION, PACKAGE_KIND, "packages"))
DEFAULT_PACKAGE_NAME = "uds-vms"
RULE_TAG = "uds-vm:"
MAX_ATTEMPTS = 5
CONDITION_TYPE = "UDSPackageSynced"
PACKAGE_CRD = "packages.uds.dev"
CRD_TTL_S = 300.0  # the Package CRD changes with a UDS Core upgrade only: read it at most every 5 minutes

Rules = dict[str, list[dict[str, Any]]]


@dataclass(frozen=True)
class PackageResult:
    """Outcome of one sync: which Package carries the rules, writes made, or why nothing could be done."""

    package: str | None = None
    writes: int = 0
    problem: tuple[str, str] | None = None
    """(reason, message) when the rules could not be put in place."""


class PackageProblemError(Exception):
    """The namespace's Packages cannot take our rules (several Packages, CRD missing)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def sections_of(package: Mapping[str, Any] | None) -> tuple[list[Any], ...]:
    """The rule lists we manage (``network.allow``, ``network.expose``, ``monitor``); absent = empty."""
    spec = (package or {}).get("spec") or {}
    result: list[list[Any]] = []
    for path in RULE_SECTIONS:
        node: Any = spec
        for key in path:
            node = node.get(key) if isinstance(node, Mapping) else None
        result.append(list(node or []))
    return tuple(result)


def tagged_vms(package: Mapping[str, Any] | None) -> set[str]:
    """Names of the VMs that have rules in ``package`` (parsed from the description tags)."""
    names: set[str] = set()
    for section in sections_of(package):
        for entry in section:
            description = str(entry.get("description", "")) if isinstance(entry, Mapping) else ""
            if description.startswith(RULE_TAG):
                name = description[len(RULE_TAG) :].split(":", 1)[0]
                if name:
                    names.add(name)
    return names


def choose_package(packages: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The namespace's Package: none, the only one, or an error when UDS's one-per-namespace rule breaks."""
    if not packages:
        return None
    if len(packages) == 1:
        return packages[0]
    names = sorted(str((p.get("metadata") or {}).get("name")) for p in packages)
    raise PackageProblemError(
        "SeveralPackages",
        f"namespace has {len(names)} UDS Packages ({', '.join(names)}); UDS Core allows one per namespace, "
        "so merge them into one and the VM rules follow",
    )


def _is_ours(package: Mapping[str, Any]) -> bool:
    labels = (package.get("metadata") or {}).get("labels") or {}
    return all(labels.get(key) == value for key, value in MANAGED_BY_LABEL.items())


def _is_empty_shell(package: Mapping[str, Any]) -> bool:
    """True for a Package we created that holds no rule of anybody and nothing else in its spec."""
    if not _is_ours(package) or any(sections_of(package)):
        return False
    spec = dict(package.get("spec") or {})
    network = dict(spec.pop("network", None) or {})
    spec.pop("monitor", None)
    spec.pop("kubevirt", None)  # our own flag on our own Package: nothing of anybody else
    network.pop("allow", None)
    network.pop("expose", None)
    return not spec and not network


class PackageSync:
    """Merge/remove one VM's rules in the namespace's Package, one namespace at a time."""

    def __init__(self, api: kube.KubeApi, vm_known: Callable[[str, str], bool] | None = None) -> None:
        self.api = api
        self._vm_known = vm_known or (lambda _ns, _name: False)
        self._locks: dict[str, asyncio.Lock] = {}
        self._kubevirt: tuple[float, bool] | None = None

    async def kubevirt_supported(self) -> bool:
        """Whether the site's Package CRD has ``spec.kubevirt.enabled``: read, not assumed; unreadable: no."""
        now = time.monotonic()
        if self._kubevirt is None or now - self._kubevirt[0] >= CRD_TTL_S:
            try:
                crd = await self.api.get(kube.CRD, None, PACKAGE_CRD)
            except KubeApiError:  # e.g. 403 with namespaced RBAC: do not write a field we cannot vouch for
                crd = None
            self._kubevirt = (now, package_supports_kubevirt(crd))
        return self._kubevirt[1]

    def _lock(self, namespace: str) -> asyncio.Lock:
        return self._locks.setdefault(namespace, asyncio.Lock())

    async def sync(self, namespace: str, vm_name: str, rules: Rules | None) -> PackageResult:
        """Put ``rules`` of ``vm_name`` into the Package (``None``: remove them); retries on conflicts."""
        async with self._lock(namespace):
            for attempt in range(1, MAX_ATTEMPTS + 1):
                try:
                    return await self._sync_once(namespace, vm_name, rules)
                except PackageProblemError as problem:
                    return PackageResult(problem=(problem.reason, problem.message))
                except KubeApiError as exc:
                    if exc.code != 409 or attempt == MAX_ATTEMPTS:
                        raise
                    log.info(
                        "Package changed underneath, retrying",
                        extra={"namespace": namespace, "vm": vm_name, "attempt": attempt},
                    )
        raise AssertionError("unreachable")  # pragma: no cover

    async def mesh_mode(self, namespace: str) -> str:
        """The namespace's service-mesh mode as its Package declares it (UDS Core's default without one)."""
        try:
            return mesh_mode(choose_package(await self.api.list(PACKAGE, namespace)))
        except PackageProblemError:
            return mesh_mode(None)  # several Packages: the sync reports it; render as UDS's default

    async def _orphans(self, namespace: str, package: Mapping[str, Any] | None, keep: str) -> list[str]:
        """Tagged VMs that no longer exist: not in the cache *and* absent on the API server."""
        gone = []
        for name in sorted(tagged_vms(package) - {keep}):
            if self._vm_known(namespace, name):
                continue
            if await self.api.get(kube.UDS_VM, namespace, name) is None:
                gone.append(name)
        return gone

    async def _other_members(self, namespace: str, vm_name: str) -> bool:
        """True when another live VM of the namespace is in uds-package mode (it relies on the Package's
        default-deny even without rules of its own), read from the API server, not the cache."""
        for vm in await self.api.list(kube.UDS_VM, namespace):
            meta = vm.get("metadata") or {}
            network = (vm.get("spec") or {}).get("network") or {}
            live = meta.get("name") != vm_name and not meta.get("deletionTimestamp")
            if live and network.get("mode") == "uds-package":
                return True
        return False

    async def _sync_once(self, namespace: str, vm_name: str, rules: Rules | None) -> PackageResult:
        existing = choose_package(await self.api.list(PACKAGE, namespace))
        if existing is None and rules is None:
            return PackageResult()
        desired = existing
        for orphan in await self._orphans(namespace, existing, keep=vm_name):
            desired = remove_vm_from_package(dict(desired or {}), orphan)
        if rules is None:
            desired = remove_vm_from_package(dict(desired or {}), vm_name)
        else:
            desired = merge_package(
                desired, vm_name, rules, namespace=namespace, package_name=DEFAULT_PACKAGE_NAME
            )
            desired = with_kubevirt_enabled(desired, await self.kubevirt_supported())
        if existing is None:
            return PackageResult(DEFAULT_PACKAGE_NAME, await self._create(namespace, desired))
        meta = existing.get("metadata") or {}
        name = str(meta.get("name"))
        if rules is None and _is_empty_shell(desired) and not await self._other_members(namespace, vm_name):
            await self._delete(namespace, meta)
            return PackageResult(None, 1)
        kubevirt = (desired.get("spec") or {}).get("kubevirt")
        if sections_of(desired) == sections_of(existing) and kubevirt == (existing.get("spec") or {}).get(
            "kubevirt"
        ):
            return PackageResult(name, 0)
        allow, expose, monitor = sections_of(desired)
        spec: dict[str, Any] = {"network": {"allow": allow, "expose": expose}, "monitor": monitor}
        if kubevirt is not None:
            spec["kubevirt"] = kubevirt
        patch = {"metadata": {"resourceVersion": meta.get("resourceVersion")}, "spec": spec}
        await self.api.merge_patch(PACKAGE, namespace, name, patch)
        log.info("Package rules merged", extra={"namespace": namespace, "package": name, "vm": vm_name})
        return PackageResult(name, 1)

    async def _create(self, namespace: str, package: dict[str, Any]) -> int:
        metadata = package.setdefault("metadata", {})
        metadata["labels"] = {**(metadata.get("labels") or {}), **MANAGED_BY_LABEL}
        try:
            await self.api.create(package)
        except KubeApiError as exc:
            if exc.code == 404:
                raise PackageProblemError(
                    "PackageCRDMissing",
                    "network.mode uds-package needs the UDS Package CRD (packages.uds.dev, installed by UDS "
                    "Core), which this cluster does not have; install UDS Core or use network.mode: "
                    "networkpolicy",
                ) from exc
            raise  # 409 AlreadyExists: somebody created one meanwhile; the retry merges into it
        return 1

    async def _delete(self, namespace: str, meta: Mapping[str, Any]) -> None:
        await self.api.delete(
            PACKAGE,
            namespace,
            str(meta.get("name")),
            uid=meta.get("uid"),
            resource_version=meta.get("resourceVersion"),
        )


def package_condition(result: PackageResult, namespace: str, rule_count: int) -> Condition:
    """The ``UDSPackageSynced`` condition of a VM in uds-package mode."""
    if result.problem is not None:
        return Condition("False", result.problem[0], result.problem[1])
    return Condition(
        "True",
        "RulesMerged",
        f"{rule_count} rule(s) of this VM are merged into UDS Package {namespace}/{result.package}; "
        "UDS Core turns them into NetworkPolicies and gateway routes.",
    )
