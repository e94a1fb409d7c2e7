"""Trust only the cluster's CA in the operator process.

The operator talks to exactly one TLS server: the Kubernetes API, whose CA comes with the credentials (the
service account's ``ca.crt`` in a pod, ``certificate-authority(-data)`` in a kubeconfig). Yet every default
SSL context — aiohttp builds one when it is imported — loads the whole system CA bundle: ~140 public roots
the operator never needs, and ~2 MiB of resident memory. Pointing OpenSSL's default paths at the cluster CA
(or at nothing, when the CA is passed inline) before aiohttp is imported removes both the memory and the
needless trust (SC-8/SC-17: no public CA can vouch for an impostor API server).

A user who set ``SSL_CERT_FILE``/``SSL_CERT_DIR`` keeps them, and a connection without its own CA (a
kubeconfig that relies on the system store) keeps the system defaults.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

from uds_vm_operator.runtime.errors import KubeConfigError
from uds_vm_operator.runtime.kubeconfig import current_entries

SERVICE_ACCOUNT_CA = Path("/var/run/secrets/kubernetes.io/serviceaccount/ca.crt")
TRUST_VARIABLES = ("SSL_CERT_FILE", "SSL_CERT_DIR")


def restrict_default_trust(
    kubeconfig: str | None,
    environ: MutableMapping[str, str] = os.environ,
    service_account_ca: Path = SERVICE_ACCOUNT_CA,
) -> str | None:
    """Point the default trust store at the cluster CA; returns the file now trusted, or None if unchanged.

    Must run before ``ssl``-using libraries build their default contexts (i.e. before importing aiohttp).
    """
    if any(name in environ for name in TRUST_VARIABLES):
        return None
    source = _cluster_ca(kubeconfig, environ, service_account_ca)
    if source is None:
        return None
    environ["SSL_CERT_FILE"] = source
    environ["SSL_CERT_DIR"] = os.devnull
    return source


def _cluster_ca(kubeconfig: str | None, environ: MutableMapping[str, str], sa_ca: Path) -> str | None:
    """The CA file the connection uses (``os.devnull`` when the CA is inline); None: it uses the system's."""
    if kubeconfig is None and environ.get("KUBERNETES_SERVICE_HOST") and sa_ca.is_file():
        return str(sa_ca)
    path = kubeconfig or (environ.get("KUBECONFIG") or "").split(os.pathsep)[0] or None
    if path is None:
        return None
    cluster = _current_cluster(Path(path))
    if cluster is None:
        return None
    if cluster.get("certificate-authority-data"):
        return os.devnull  # passed to the SSL context as data; the defaults need nothing
    authority = cluster.get("certificate-authority")
    if isinstance(authority, str) and authority:
        return str((Path(path).resolve().parent / authority).resolve())
    return None


def _current_cluster(path: Path) -> dict[str, Any] | None:
    """The current context's cluster entry; None when the file cannot be read (the login reports that)."""
    try:
        _, cluster, _ = current_entries(path)
    except KubeConfigError:
        return None
    return cluster if isinstance(cluster, dict) else None
