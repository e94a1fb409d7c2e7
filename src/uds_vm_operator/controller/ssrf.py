"""CDI's private-address (SSRF) protection, predicted before the import gets stuck.

Newer CDI releases refuse http/s3/imageio imports whose host is a private, loopback or link-local address
unless a cluster admin lists it in ``CDIConfig.spec.allowedSourceURLs`` (CDI ``doc/ssrf-protection.md``;
the DataVolume must then be re-created). An air-gapped image server on the LAN is exactly such a host, so
the operator checks the source URL itself and names the entry the admin has to add, instead of letting the
import fail inside an importer pod.

Honest about the installed CDI: the field is looked up in the installed ``cdiconfigs.cdi.kubevirt.io``
schema. CDI v1.65.0 (pinned in versions.env) has no ``allowedSourceURLs``; such a CDI does not block
private addresses, and the condition says so rather than inventing a field.

Only what can be known without DNS is judged here: literal IP hosts, and names that are internal by
construction (``localhost``, ``*.svc``, ``*.cluster.local``); the reconciler adds the addresses a name
resolves to through the cluster's DNS (the resolver CDI's importer pod uses too). Pure functions; the
controller supplies the CRD, the CDIConfig and the resolved addresses.

The operator's own lock (issue 32, ADR 0016) does not depend on CDI: an internal host is refused before any
child exists unless the admin allowlist (chart value ``ssrf.allowedSourceHosts``, operator flag
``--allowed-source-host`` / env ``UDS_VM_ALLOWED_SOURCE_HOSTS``) names it, because the fetched bytes become
a disk the VM's author can read: an SSRF into metadata services or cluster-internal endpoints.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from uds_vm_operator.controller.status import Refusal
from uds_vm_operator.runtime.conditions import Condition

CDI_CONFIG_CRD = "cdiconfigs.cdi.kubevirt.io"
CDI_CONFIG_NAME = "config"
ALLOWLIST_FIELD = "allowedSourceURLs"
CONDITION_TYPE = "ImportSourceAllowed"
BLOCKED_REASON = "BlockedByCDISSRFProtection"
PRIVATE_SOURCE_REASON = "PrivateSourceRefused"
ALLOWLIST_ENV = "UDS_VM_ALLOWED_SOURCE_HOSTS"
ALLOWLIST_CHART_VALUE = "ssrf.allowedSourceHosts"

BLOCKED_NETWORKS = tuple(
    ipaddress.ip_network(cidr)
    for cidr in (
        "169.254.0.0/16",
        "10.0.0.0/8",
        "172.16.0.0/12",
        "192.168.0.0/16",
        "100.64.0.0/10",
        "127.0.0.0/8",
        "0.0.0.0/8",
        "224.0.0.0/4",
        "240.0.0.0/4",
        "fc00::/7",
        "fe80::/10",
        "::1/128",
        "::/128",
        "::ffff:0:0/96",
        "64:ff9b::/96",
    )
)
"""The ranges CDI's SSRF protection blocks by default (CDI doc/ssrf-protection.md)."""
INTERNAL_NAMES = ("localhost",)
INTERNAL_SUFFIXES = (".localhost", ".svc", ".cluster.local")


@dataclass(frozen=True)
class InternalHost:
    """A source host CDI would refuse by default, and the allowlist entry that admits it."""

    host: str
    entry: str
    why: str


def source_host(url: str | None) -> str | None:
    """The host of an http/s3 source URL (lower case, brackets of IPv6 literals removed), or None."""
    if not url:
        return None
    try:
        host = urlsplit(url).hostname
    except ValueError:
        return None
    return host.lower() if host else None


def _blocked_network(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    mapped = getattr(address, "ipv4_mapped", None)
    if mapped is not None:  # ::ffff:169.254.169.254 is the metadata service too
        found = _blocked_network(mapped)
        return found if found is not None else str(BLOCKED_NETWORKS[-2])
    for network in BLOCKED_NETWORKS:
        if address.version == network.version and address in network:
            return str(network)
    return None


def internal_host(url: str | None, resolved: Sequence[str] = ()) -> InternalHost | None:
    """Classify the URL's host: an :class:`InternalHost` when CDI blocks it by default, else None.

    ``resolved``: the addresses a host name resolves to (empty for IP literals or when unresolved); a name
    that resolves to any internal address is internal, named by that address.
    """
    host = source_host(url)
    if host is None:
        return None
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        if host in INTERNAL_NAMES or host.endswith(INTERNAL_SUFFIXES):
            return InternalHost(host, host, "an in-cluster or loopback name")
        for value in resolved:
            try:
                network = _blocked_network(ipaddress.ip_address(value))
            except ValueError:
                continue
            if network is not None:
                return InternalHost(
                    host, host, f"a name that resolves to {value}, in the blocked range {network}"
                )
        return None
    network = _blocked_network(address)
    if network is not None:
        return InternalHost(host, str(address), f"in the blocked range {network}")
    return None


def allowlist_covers(entries: Sequence[Any], host: InternalHost) -> bool:
    """True when an ``allowedSourceURLs`` entry admits ``host`` (CIDR, exact IP, hostname + subdomains)."""
    try:
        address: ipaddress.IPv4Address | ipaddress.IPv6Address | None = ipaddress.ip_address(host.host)
    except ValueError:
        address = None
    for raw in entries:
        entry = str(raw).strip().lower()
        if not entry:
            continue
        if address is not None:
            try:
                if address in ipaddress.ip_network(entry, strict=False):
                    return True
            except ValueError:
                continue
        elif host.host == entry or host.host.endswith("." + entry):
            return True
    return False


def cdi_has_allowlist(crd: Mapping[str, Any] | None) -> bool:
    """True when the installed CDIConfig CRD (v1beta1) has ``spec.allowedSourceURLs``."""
    for version in ((crd or {}).get("spec") or {}).get("versions") or []:
        if version.get("name") != "v1beta1":
            continue
        schema = (version.get("schema") or {}).get("openAPIV3Schema") or {}
        spec = (schema.get("properties") or {}).get("spec") or {}
        return ALLOWLIST_FIELD in (spec.get("properties") or {})
    return False


def source_url_of(raw_source: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(kind, url)`` for the sources CDI's protection covers (http, s3), else None."""
    for kind in ("http", "s3"):
        url = (raw_source.get(kind) or {}).get("url") if isinstance(raw_source.get(kind), Mapping) else None
        if url:
            return kind, str(url)
    return None


def ssrf_condition(
    kind: str,
    url: str,
    *,
    crd_has_allowlist: bool,
    allowlist: Sequence[Any],
) -> Condition | None:
    """The ``ImportSourceAllowed`` condition for one source, or None when the host is not internal."""
    host = internal_host(url)
    if host is None:
        return None
    entry = host.entry
    field = f"CDIConfig.spec.{ALLOWLIST_FIELD}"
    if not crd_has_allowlist:
        return Condition(
            "True",
            "CDIHasNoPrivateAddressBlock",
            f"spec.source.{kind}.url host {host.host} is {host.why}; the installed CDI's CDIConfig CRD has "
            f"no spec.{ALLOWLIST_FIELD} (CDI <= v1.65 has no private-address protection), so the import is "
            f"not blocked. After a CDI upgrade that adds it, a cluster admin must add {entry!r} to {field}.",
        )
    if allowlist_covers(allowlist, host):
        return Condition("True", "AllowedByCDIConfig", f"{field} admits {host.host}.")
    patch = '{"spec":{"' + ALLOWLIST_FIELD + '":[<existing entries>, "' + entry + '"]}}'
    return Condition(
        "False",
        BLOCKED_REASON,
        f"CDI refuses imports from spec.source.{kind}.url host {host.host} ({host.why}). A cluster admin "
        f"must add {entry!r} to {field} "
        f"(kubectl patch cdiconfig {CDI_CONFIG_NAME} --type=merge -p '{patch}'); "
        "the DataVolume is created once the entry is there.",
    )


def source_allowlist_from_env(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The admin allowlist of internal import hosts, from env ``UDS_VM_ALLOWED_SOURCE_HOSTS`` (commas)."""
    raw = (environ if environ is not None else os.environ).get(ALLOWLIST_ENV, "")
    return tuple(entry.strip() for entry in raw.split(",") if entry.strip())


def private_source_refusal(
    raw_spec: Mapping[str, Any], allowlist: Sequence[str], resolved: Sequence[str] = ()
) -> Refusal | None:
    """The refusal of an http/s3 source on an internal host the admin allowlist does not name, else None."""
    source = source_url_of(raw_spec.get("source") or {})
    if source is None:
        return None
    kind, url = source
    host = internal_host(url, resolved)
    if host is None or allowlist_covers(allowlist, host):
        return None
    return Refusal(
        PRIVATE_SOURCE_REASON,
        f"spec.source.{kind}.url host {host.host} is {host.why}: private, loopback, link-local and metadata "
        "addresses are refused as import sources, because the fetched bytes become a disk the VM's author "
        f"can read. If this server is a trusted image mirror, a cluster admin adds {host.entry!r} to the "
        f"chart value {ALLOWLIST_CHART_VALUE} (operator env {ALLOWLIST_ENV}). Nothing was created.",
    )
