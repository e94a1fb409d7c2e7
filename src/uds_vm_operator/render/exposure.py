"""Exposure of VM ports: a Service ``<name>-<port>`` per ``network.expose[]`` item and, for HTTP, a Gateway
API ``HTTPRoute`` (TLS is terminated at the referenced Gateway, never inside this object).

The Service selects the virt-launcher pod by ``uds.dev/vm`` *and* ``kubevirt.io: virt-launcher``, so it never
routes to another pod of the VM (importer or verifier pods).
"""

from __future__ import annotations

from typing import Any

from uds_vm_operator.api.models import Exposure, UDSVirtualMachineSpec
from uds_vm_operator.apiversions import GATEWAY_API_VERSION
from uds_vm_operator.child_names import service_name
from uds_vm_operator.render.common import VM_LABEL, Owner, child_metadata

LAUNCHER_LABELS = {"kubevirt.io": "virt-launcher"}


def port_name(item: Exposure) -> str:
    """The Service port name: declared, or ``<protocol>-<port>`` (e.g. ``tcp-8443``)."""
    return item.name or f"{item.protocol.lower()}-{item.port}"


def render_service(owner: Owner, item: Exposure) -> dict[str, Any]:
    """A ClusterIP Service for one exposed port."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": child_metadata(owner, service_name(owner.name, item.port)),
        "spec": {
            "type": "ClusterIP",
            "selector": {VM_LABEL: owner.name, **LAUNCHER_LABELS},
            "ports": [
                {
                    "name": port_name(item),
                    "protocol": item.protocol,
                    "port": item.port,
                    "targetPort": item.port,
                }
            ],
        },
    }


def render_http_route(owner: Owner, item: Exposure) -> dict[str, Any] | None:
    """An HTTPRoute attaching the Service to the declared Gateway and hostname, or None for non-HTTP ports."""
    if item.http is None:
        return None
    return {
        "apiVersion": GATEWAY_API_VERSION,
        "kind": "HTTPRoute",
        "metadata": child_metadata(owner, service_name(owner.name, item.port)),
        "spec": {
            "parentRefs": [
                {
                    "group": "gateway.networking.k8s.io",
                    "kind": "Gateway",
                    "name": item.http.gateway.name,
                    "namespace": item.http.gateway.namespace,
                }
            ],
            "hostnames": [item.http.hostname],
            "rules": [
                {
                    "matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                    "backendRefs": [
                        {
                            "group": "",
                            "kind": "Service",
                            "name": service_name(owner.name, item.port),
                            "port": item.port,
                            "weight": 1,
                        }
                    ],
                }
            ],
        },
    }


def render_exposure(owner: Owner, spec: UDSVirtualMachineSpec) -> list[dict[str, Any]]:
    """Services and HTTPRoutes for every exposed port, Service before its route."""
    children: list[dict[str, Any]] = []
    for item in spec.network.expose:
        children.append(render_service(owner, item))
        route = render_http_route(owner, item)
        if route is not None:
            children.append(route)
    return children
