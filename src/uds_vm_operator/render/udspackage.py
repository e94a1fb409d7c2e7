"""``network.mode: uds-package``: the VM's allow/expose rules merged into the namespace's UDS ``Package``.

UDS Core allows one ``Package`` (``uds.dev/v1alpha1``) per namespace and already writes default-deny plus DNS
egress for it, so in UDS clusters we add rules there instead of stacking our own NetworkPolicy. Every rule we
write carries a description starting ``uds-vm:<name>:``; merging replaces exactly the rules of one VM and
leaves rules owned by others (other VMs, the application team) untouched. Pure functions: the controller
reads the Package, calls :func:`merge_package` / :func:`remove_vm_from_package`, and applies the result.

Mapping onto the Package schema (every allow entry needs a remote):
- egress ``dns``: nothing (UDS adds DNS egress itself); ``internet``: ``remoteGenerated: Anywhere``;
  ``vpn``: the gateway pods via ``remoteNamespace`` + ``remoteSelector``; ``none``: nothing.
- ``allow[]``: ``remoteCidr`` or ``remoteNamespace``/``remoteSelector``. The Package names namespaces, it does
  not select them by label, so a namespace selector must be ``matchLabels: {kubernetes.io/metadata.name: X}``.
- ``expose[]`` with ``http``: an ``expose`` entry on the ``admin`` gateway when the Gateway's name or
  namespace says admin, else ``tenant``; ``host`` is the first DNS label of the hostname (UDS appends its
  domain).
- an exposed port named ``metrics``: a ``monitor`` entry so Prometheus scrapes the guest exporter.
- only fields of uds-core v1.11.0's Package schema are written (that schema is
  tests/integration/crds/uds-package-v1alpha1.yaml, checked with Strict field validation); its ports are TCP
  only, so a UDP or SCTP port is a spec error in this mode rather than a rule that silently opens TCP.
"""

from __future__ import annotations

import copy
from typing import Any

from uds_vm_operator.api.errors import SpecError
from uds_vm_operator.api.models import (
    AllowRule,
    Exposure,
    HttpExposure,
    LabelSelector,
    Network,
    UDSVirtualMachineSpec,
)
from uds_vm_operator.apiversions import UDS_PACKAGE_API_VERSION
from uds_vm_operator.child_names import service_name
from uds_vm_operator.render.common import VM_LABEL
from uds_vm_operator.render.exposure import port_name
from uds_vm_operator.render.networkpolicy import NAMESPACE_NAME_LABEL

PACKAGE_API_VERSION = UDS_PACKAGE_API_VERSION
PACKAGE_KIND = "Package"
RULE_SECTIONS = (("network", "allow"), ("network", "expose"), ("monitor",))


def rule_prefix(vm_name: str) -> str:
    """The description prefix that marks a Package rule as owned by one VM."""
    return f"uds-vm:{vm_name}:"


def _namespace_name(selector: LabelSelector | None, where: str) -> str | None:
    if selector is None:
        return None
    labels = selector.match_labels or {}
    if selector.match_expressions or set(labels) != {NAMESPACE_NAME_LABEL}:
        raise SpecError(
            f"{where}: in network.mode uds-package a namespace is named, not selected; use "
            f"namespaceSelector.matchLabels: {{{NAMESPACE_NAME_LABEL}: <namespace>}}"
        )
    return labels[NAMESPACE_NAME_LABEL]


def _pod_labels(selector: LabelSelector | None, where: str) -> dict[str, str] | None:
    if selector is None:
        return None
    if selector.match_expressions:
        raise SpecError(f"{where}: in network.mode uds-package pod selectors support matchLabels only")
    return dict(selector.match_labels or {})


def _tcp_only(protocol: str, where: str) -> None:
    """A Package port has no protocol (uds-core: "protocol is always TCP"): refuse rather than widen."""
    if protocol != "TCP":
        raise SpecError(
            f"{where}: a UDS Package allow rule opens TCP ports only, so {protocol} cannot be expressed in "
            "network.mode uds-package; use network.mode: networkpolicy for this VM"
        )


def _allow_entry(vm_name: str, rule: AllowRule, index: int) -> list[dict[str, Any]]:
    where = f"spec.network.allow[{index}]"
    base: dict[str, Any] = {
        "direction": rule.direction,
        "selector": {VM_LABEL: vm_name},
        "description": f"{rule_prefix(vm_name)}allow-{index}",
    }
    if rule.cidr is not None:
        base["remoteCidr"] = rule.cidr
    else:
        namespace = _namespace_name(rule.namespace_selector, where)
        pods = _pod_labels(rule.pod_selector, where)
        if namespace is not None:
            base["remoteNamespace"] = namespace
        if pods is not None:
            base["remoteSelector"] = pods
        if namespace is None and pods is None:
            base["remoteGenerated"] = "Anywhere"
    if not rule.ports:
        return [base]
    for port in rule.ports:
        _tcp_only(port.protocol, f"{where}.ports")
    return [
        {**base, "port": port.port, "description": f"{base['description']}-{port.port}"}
        for port in rule.ports
    ]


def _egress_rules(network: Network, selector: dict[str, str], prefix: str) -> list[dict[str, Any]]:
    """The entry for egress ``internet`` or ``vpn``; ``dns`` and ``none`` need none (UDS adds DNS itself)."""
    if network.egress == "internet":
        return [
            {
                "direction": "Egress",
                "selector": selector,
                "remoteGenerated": "Anywhere",
                "description": f"{prefix}egress-internet",
            }
        ]
    if network.egress == "vpn" and network.vpn_gateway is not None:
        entry: dict[str, Any] = {
            "direction": "Egress",
            "selector": selector,
            "remoteSelector": _pod_labels(network.vpn_gateway.pod_selector, "spec.network.vpnGateway") or {},
            "description": f"{prefix}egress-vpn",
        }
        namespace = _namespace_name(network.vpn_gateway.namespace_selector, "spec.network.vpnGateway")
        if namespace is not None:
            entry["remoteNamespace"] = namespace
        return [entry]
    return []


def _gateway_expose(
    vm_name: str, item: Exposure, http: HttpExposure, selector: dict[str, str], prefix: str
) -> dict[str, Any]:
    """An ``expose`` entry: the admin gateway when the Gateway's name or namespace says so, else tenant."""
    gateway = http.gateway
    return {
        "service": service_name(vm_name, item.port),
        "selector": selector,
        "gateway": "admin" if "admin" in f"{gateway.name} {gateway.namespace}" else "tenant",
        "host": http.hostname.split(".")[0],
        "port": item.port,
        "targetPort": item.port,
        "description": f"{prefix}expose-{item.port}",
    }


def _intra_namespace_allow(item: Exposure, selector: dict[str, str], prefix: str) -> dict[str, Any]:
    """An exposed port without HTTP: open to the VM's own namespace (TCP only, like every Package port)."""
    _tcp_only(item.protocol, f"spec.network.expose[port {item.port}]")
    return {
        "direction": "Ingress",
        "selector": selector,
        "remoteGenerated": "IntraNamespace",
        "port": item.port,
        "description": f"{prefix}expose-{item.port}",
    }


def _monitor_entry(item: Exposure, selector: dict[str, str], prefix: str) -> dict[str, Any]:
    """Prometheus scrapes the guest exporter on the port named ``metrics``."""
    return {
        "selector": selector,
        "portName": "metrics",
        "targetPort": item.port,
        "path": "/metrics",
        "description": f"{prefix}metrics",
    }


def vm_package_rules(vm_name: str, spec: UDSVirtualMachineSpec) -> dict[str, list[dict[str, Any]]]:
    """The Package rules of one VM: ``{"allow": [...], "expose": [...], "monitor": [...]}``."""
    network = spec.network
    selector = {VM_LABEL: vm_name}
    prefix = rule_prefix(vm_name)
    allow = _egress_rules(network, selector, prefix)
    for index, rule in enumerate(network.allow):
        allow += _allow_entry(vm_name, rule, index)
    expose: list[dict[str, Any]] = []
    monitor: list[dict[str, Any]] = []
    for item in network.expose:
        if item.http is not None:
            expose.append(_gateway_expose(vm_name, item, item.http, selector, prefix))
        else:
            allow.append(_intra_namespace_allow(item, selector, prefix))
        if port_name(item) == "metrics":
            monitor.append(_monitor_entry(item, selector, prefix))
    return {"allow": allow, "expose": expose, "monitor": monitor}


def _owned_by(entry: Any, vm_name: str) -> bool:
    return isinstance(entry, dict) and str(entry.get("description", "")).startswith(rule_prefix(vm_name))


def _section(spec: dict[str, Any], path: tuple[str, ...]) -> list[Any]:
    node = spec
    for key in path[:-1]:
        node = node.setdefault(key, {})
    section: list[Any] = node.setdefault(path[-1], [])
    return section


def remove_vm_from_package(existing: dict[str, Any], vm_name: str) -> dict[str, Any]:
    """The Package without the rules of ``vm_name``; other rules keep their order. Input is not modified."""
    package = copy.deepcopy(existing)
    spec = package.setdefault("spec", {})
    for path in RULE_SECTIONS:
        section = _section(spec, path)
        section[:] = [entry for entry in section if not _owned_by(entry, vm_name)]
    return package


def merge_package(
    existing: dict[str, Any] | None,
    vm_name: str,
    rules: dict[str, list[dict[str, Any]]],
    *,
    namespace: str | None = None,
    package_name: str | None = None,
) -> dict[str, Any]:
    """The Package with the rules of ``vm_name`` replaced by ``rules`` (created if ``existing`` is None).

    Rules of other owners stay untouched and in place; this VM's rules are appended in a stable order, so
    merging the same input twice yields the same object (no write on resync).
    """
    if existing is None:
        if namespace is None:
            raise SpecError("merge_package: a new Package needs the namespace it belongs to")
        existing = {
            "apiVersion": PACKAGE_API_VERSION,
            "kind": PACKAGE_KIND,
            "metadata": {"name": package_name or namespace, "namespace": namespace},
            "spec": {"network": {"allow": [], "expose": []}, "monitor": []},
        }
    package = remove_vm_from_package(existing, vm_name)
    spec = package["spec"]
    for path in RULE_SECTIONS:
        key = path[-1]
        _section(spec, path).extend(copy.deepcopy(rules.get(key, [])))
    return package


# --------------------------------------------------------------------------------- sidecar mesh and kubevirt
# What the UDS VM work (uds-core's VM proof of concept) found VM namespaces need; see
# ../shared/reference/uds-core-vm.md. UDS Core's policies allow exactly these annotations, and only on
# virt-launcher pods (the VM template) and CDI worker pods (importer, upload, clone), only in namespaces its
# operator labelled for KubeVirt. Ambient mode needs none of them.
MESH_MODES = ("sidecar", "ambient")
DEFAULT_MESH_MODE = "ambient"  # the Package CRD's default for spec.network.serviceMesh.mode
# KubeVirt's masquerade binding puts the guest behind k6t-eth0 inside the launcher pod: Istio must redirect
# that interface's traffic, and the istio-proxy readiness probe (pilot-agent on 127.0.0.1, probed by the
# kubelet on the pod IP) must go, or the launcher is never Ready.
LAUNCHER_SIDECAR_ANNOTATIONS = {
    "traffic.sidecar.istio.io/kubevirtInterfaces": "k6t-eth0",
    "istio.io/reroute-virtual-interfaces": "k6t-eth0",
    "status.sidecar.istio.io/port": "0",
}
# CDI copies this annotation from a DataVolume to the worker pods it starts for it; a sidecar in an importer
# keeps the pod from ever completing.
CDI_WORKER_SIDECAR_ANNOTATIONS = {"sidecar.istio.io/inject": "false"}


def mesh_mode(package: dict[str, Any] | None) -> str:
    """The namespace's mesh mode as its Package declares it (UDS Core's default when unset)."""
    mode = (((package or {}).get("spec") or {}).get("network") or {}).get("serviceMesh") or {}
    value = mode.get("mode") if isinstance(mode, dict) else None
    return value if value in MESH_MODES else DEFAULT_MESH_MODE


def with_mesh_annotations(children: list[dict[str, Any]], mode: str) -> list[dict[str, Any]]:
    """The children with the sidecar-mode annotations on the launcher template and on every DataVolume
    (standalone or a VM's dataVolumeTemplates); in any other mode the children unchanged. Pure."""
    if mode != "sidecar":
        return children
    result = copy.deepcopy(children)
    for child in result:
        if child.get("kind") == "DataVolume":
            _annotate(child.setdefault("metadata", {}), CDI_WORKER_SIDECAR_ANNOTATIONS)
        elif child.get("kind") == "VirtualMachine":
            spec = child.setdefault("spec", {})
            _annotate(
                spec.setdefault("template", {}).setdefault("metadata", {}), LAUNCHER_SIDECAR_ANNOTATIONS
            )
            for template in spec.get("dataVolumeTemplates") or []:
                _annotate(template.setdefault("metadata", {}), CDI_WORKER_SIDECAR_ANNOTATIONS)
    return result


def _annotate(metadata: dict[str, Any], annotations: dict[str, str]) -> None:
    metadata["annotations"] = {**(metadata.get("annotations") or {}), **annotations}


def package_supports_kubevirt(crd: dict[str, Any] | None) -> bool:
    """True when the installed Package CRD has ``spec.kubevirt.enabled`` (UDS's VM work; uds-core v1.11.0
    has not released it). Writing it to a CRD without the field would be refused (Strict) or pruned."""
    for version in ((crd or {}).get("spec") or {}).get("versions") or []:
        if version.get("name") != PACKAGE_API_VERSION.split("/", 1)[1]:
            continue
        node: Any = (version.get("schema") or {}).get("openAPIV3Schema") or {}
        for key in ("spec", "kubevirt", "enabled"):
            node = (node.get("properties") or {}).get(key) if isinstance(node, dict) else None
            if not node:
                return False
        return True
    return False


def with_kubevirt_enabled(package: dict[str, Any], supported: bool) -> dict[str, Any]:
    """The Package with ``spec.kubevirt.enabled: true`` when the site's CRD supports it; else unchanged.
    UDS then labels the namespace ``uds.dev/kubevirt-workload``; its policies admit the annotations above."""
    if not supported:
        return package
    result = copy.deepcopy(package)
    spec = result.setdefault("spec", {})
    spec["kubevirt"] = {**(spec.get("kubevirt") or {}), "enabled": True}
    return result
