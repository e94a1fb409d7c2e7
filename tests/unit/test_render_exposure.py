"""Exposure: a Service per port selecting only the launcher pod, an HTTPRoute for HTTP ports."""

from __future__ import annotations

from uds_vm_operator.api import parse_vm_spec
from uds_vm_operator.render import Owner
from uds_vm_operator.render.exposure import render_exposure

OWNER = Owner("web", "apps", "uid-1")
HTTP = {"hostname": "vm.example.com", "gateway": {"name": "tenant", "namespace": "istio-gw"}}


def test_services_and_routes() -> None:
    raw = {
        "source": {"upload": {}},
        "disk": {"virtualSize": "1Gi"},
        "network": {
            "expose": [{"port": 8443, "name": "https", "http": HTTP}, {"port": 5353, "protocol": "UDP"}]
        },
    }
    service, route, udp = render_exposure(OWNER, parse_vm_spec(raw))
    assert (service["kind"], service["metadata"]["name"]) == ("Service", "web-8443")
    assert service["spec"]["selector"] == {"uds.dev/vm": "web", "kubevirt.io": "virt-launcher"}
    assert service["spec"]["ports"] == [
        {"name": "https", "protocol": "TCP", "port": 8443, "targetPort": 8443}
    ]
    assert service["metadata"]["ownerReferences"] == [OWNER.reference()]
    assert (route["apiVersion"], route["kind"], route["metadata"]["name"]) == (
        "gateway.networking.k8s.io/v1",
        "HTTPRoute",
        "web-8443",
    )
    assert route["spec"]["parentRefs"][0] | {} == {
        "group": "gateway.networking.k8s.io",
        "kind": "Gateway",
        "name": "tenant",
        "namespace": "istio-gw",
    }
    assert route["spec"]["hostnames"] == ["vm.example.com"]
    backend = route["spec"]["rules"][0]["backendRefs"][0]
    assert (backend["name"], backend["port"]) == ("web-8443", 8443)
    assert udp["spec"]["ports"][0]["name"] == "udp-5353"
    assert udp["spec"]["ports"][0]["protocol"] == "UDP"
