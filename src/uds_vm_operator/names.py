"""Kubernetes name rules, defined once: for the models (the CRD's patterns) and for the CLI, which checks
names before it writes manifests and must not import the pydantic models at start-up."""

from __future__ import annotations

import re

DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_LABEL_MAX_LENGTH = 63
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
DNS_SUBDOMAIN_MAX_LENGTH = 253
_DNS_LABEL = re.compile(DNS_LABEL_PATTERN)
_DNS_SUBDOMAIN = re.compile(DNS_SUBDOMAIN_PATTERN)


def is_dns_label(value: str) -> bool:
    """An RFC 1123 label: what a namespace and most object names must be (63 characters at most)."""
    return len(value) <= DNS_LABEL_MAX_LENGTH and _DNS_LABEL.match(value) is not None


def is_dns_subdomain(value: str) -> bool:
    """An RFC 1123 subdomain: what a ServiceAccount or StorageClass name must be (253 characters at most)."""
    return len(value) <= DNS_SUBDOMAIN_MAX_LENGTH and _DNS_SUBDOMAIN.match(value) is not None


__all__ = [
    "DNS_LABEL_MAX_LENGTH",
    "DNS_LABEL_PATTERN",
    "DNS_SUBDOMAIN_MAX_LENGTH",
    "DNS_SUBDOMAIN_PATTERN",
    "is_dns_label",
    "is_dns_subdomain",
]
