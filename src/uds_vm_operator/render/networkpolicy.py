"""The NetworkPolicy ``<name>-netpol`` that isolates the VM's virt-launcher pod (SC-7, AC-4).

Both directions are denied unless allowed. Ingress: only ``network.allow[]`` Ingress rules and the ports of
``network.expose[]`` (HTTP ports from the gateway's namespace, other ports from this namespace). Egress by
class:

- ``dns`` (default): UDP/TCP 53 to the cluster DNS pods only.
- ``none``: nothing at all.
- ``internet``: DNS plus any address except RFC 1918, link-local (cloud metadata 169.254.169.254) and the IPv6
  private/link-local ranges.
- ``vpn``: DNS plus the VPN gateway pods, selected by labels and never by an ipBlock, so the policy is a kill
  switch: without gateway pods nothing leaves.

Explicit ``allow[]`` Egress rules are added in every class, because the user wrote them.
"""

from __future__ import annotations

from typing import Any

from uds_vm_operator.api.models import AllowRule, LabelSelector, NetworkPort, UDSVirtualMachineSpec
from uds_vm_operator.apiversions import NETWORKING_API_VERSION
from uds_vm_operator.child_names import netpol_name
from uds_vm_operator.render.common import VM_LABEL, Owner, child_metadata
from uds_vm_operator.render.exposure import LAUNCHER_LABELS
from uds_vm_operator.render.guestmonitor import EXPORTER_PORT

NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
DNS_PEER: dict[str, Any] = {
    "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: "kube-system"}},
    "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
}
DNS_PORTS: list[dict[str, Any]] = [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]
PRIVATE_IPV4 = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16")
PRIVATE_IPV6 = ("fc00::/7", "fe80::/10")
OPERATOR_POD_LABELS = {"app.kubernetes.io/name": "uds-vm-operator", "app.kubernetes.io/component": "operator"}
"""The operator's pods (chart/templates/deployment.yaml): they read a monitored guest's report."""
PROMETHEUS_POD_LABELS = {"app.kubernetes.io/name": "prometheus"}
"""UDS Core's Prometheus pods (kube-prometheus-stack, in ``monitoring`` by default): the only scraper."""


def selector_dict(selector: LabelSelector) -> dict[str, Any]:
    """A label selector in Kubernetes JSON form; ``{}`` selects everything in scope."""
    return selector.to_json_dict()


def _ports(ports: list[NetworkPort]) -> list[dict[str, Any]]:
    return [{"protocol": port.protocol, "port": port.port} for port in ports]


def _allow_peer(rule: AllowRule) -> list[dict[str, Any]] | None:
    """The peers of an allow rule, or None for 'any peer'."""
    if rule.cidr is not None:
        return [{"ipBlock": {"cidr": rule.cidr}}]
    peer: dict[str, Any] = {}
    if rule.namespace_selector is not None:
        peer["namespaceSelector"] = selector_dict(rule.namespace_selector)
    if rule.pod_selector is not None:
        peer["podSelector"] = selector_dict(rule.pod_selector)
    return [peer] if peer else None


def _rule(peer_key: str, peers: list[dict[str, Any]] | None, ports: list[dict[str, Any]]) -> dict[str, Any]:
    rule: dict[str, Any] = {}
    if peers is not None:
        rule[peer_key] = peers
    if ports:
        rule["ports"] = ports
    return rule


def ingress_rules(spec: UDSVirtualMachineSpec) -> list[dict[str, Any]]:
    """Allowed ingress: explicit Ingress rules, then one rule per exposed port."""
    rules = [
        _rule("from", _allow_peer(rule), _ports(rule.ports))
        for rule in spec.network.allow
        if rule.direction == "Ingress"
    ]
    for item in spec.network.expose:
        if item.http is not None:
            peer = {"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: item.http.gateway.namespace}}}
        else:
            peer = {"podSelector": {}}
        rules.append(_rule("from", [peer], [{"protocol": item.protocol, "port": item.port}]))
    return rules


def monitoring_ingress_rule(operator_namespace: str, prometheus_namespace: str) -> dict[str, Any]:
    """spec.monitoring: the exporter's port, from the monitoring namespace's Prometheus and the operator."""
    peers = [
        {
            "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: prometheus_namespace}},
            "podSelector": {"matchLabels": dict(PROMETHEUS_POD_LABELS)},
        },
        {
            "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: operator_namespace}},
            "podSelector": {"matchLabels": dict(OPERATOR_POD_LABELS)},
        },
    ]
    return _rule("from", peers, [{"protocol": "TCP", "port": EXPORTER_PORT}])


def egress_rules(spec: UDSVirtualMachineSpec) -> list[dict[str, Any]]:
    """Allowed egress for the egress class, then explicit Egress rules."""
    network = spec.network
    rules: list[dict[str, Any]] = []
    if network.egress != "none":
        rules.append({"to": [DNS_PEER], "ports": DNS_PORTS})
    if network.egress == "internet":
        rules.append(
            {
                "to": [
                    {"ipBlock": {"cidr": "0.0.0.0/0", "except": list(PRIVATE_IPV4)}},
                    {"ipBlock": {"cidr": "::/0", "except": list(PRIVATE_IPV6)}},
                ]
            }
        )
    elif network.egress == "vpn" and network.vpn_gateway is not None:
        gateway: dict[str, Any] = {"podSelector": selector_dict(network.vpn_gateway.pod_selector)}
        if network.vpn_gateway.namespace_selector is not None:
            gateway["namespaceSelector"] = selector_dict(network.vpn_gateway.namespace_selector)
        rules.append({"to": [gateway]})
    rules += [
        _rule("to", _allow_peer(rule), _ports(rule.ports))
        for rule in network.allow
        if rule.direction == "Egress"
    ]
    return rules


def render_network_policy(
    owner: Owner,
    spec: UDSVirtualMachineSpec,
    *,
    operator_namespace: str = "uds-vm-operator",
    prometheus_namespace: str = "monitoring",
) -> dict[str, Any]:
    """The NetworkPolicy ``<name>-netpol`` selecting the VM's pod by ``uds.dev/vm`` and ``kubevirt.io``.

    ``kubevirt.io: virt-launcher`` as well, because CDI copies a DataVolume's labels (``uds.dev/vm`` among
    them) onto its importer, upload-server and cloner pods: selected by ``uds.dev/vm`` alone, those pods got
    the VM's DNS-only egress and CDI's importer could not reach the HTTP source (seen on the real node).

    Both rule lists are always written, even empty: applying ``ingress: []`` makes the operator the owner
    of the whole (atomic) list, so a rule another writer slips in (say, allow-all ingress) is replaced on
    the next reconcile instead of surviving beside ours. The API server omits empty lists when serving,
    and the controller's comparison treats an absent list as equal to ``[]``, so a resync writes nothing.
    """
    policy_spec: dict[str, Any] = {
        "podSelector": {"matchLabels": {VM_LABEL: owner.name, **LAUNCHER_LABELS}},
        "policyTypes": ["Ingress", "Egress"],
    }
    policy_spec["ingress"] = ingress_rules(spec)
    if spec.monitoring.enabled:
        policy_spec["ingress"].append(monitoring_ingress_rule(operator_namespace, prometheus_namespace))
    policy_spec["egress"] = egress_rules(spec)
    return {
        "apiVersion": NETWORKING_API_VERSION,
        "kind": "NetworkPolicy",
        "metadata": child_metadata(owner, netpol_name(owner.name)),
        "spec": policy_spec,
    }
