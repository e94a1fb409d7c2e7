"""Read a kubeconfig's current context, cluster and user: nothing heavier than PyYAML is imported.

Shared by :mod:`.transport` (credentials for the operator's requests) and :mod:`.trust`, which must run
before aiohttp is imported and so cannot import the transport.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from uds_vm_operator.runtime.errors import KubeConfigError


def current_entries(path: str | Path) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The current context, its cluster and its user; :class:`KubeConfigError` names what is missing."""
    try:
        config = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        name = config["current-context"]
        context = next(c["context"] for c in config.get("contexts") or [] if c["name"] == name)
        cluster = next(c["cluster"] for c in config.get("clusters") or [] if c["name"] == context["cluster"])
        users = {u["name"]: u.get("user") or {} for u in config.get("users") or []}
        user = users.get(context.get("user"), {})
    except (OSError, yaml.YAMLError, KeyError, TypeError, StopIteration, AttributeError) as exc:
        raise KubeConfigError(
            f"cannot use the kubeconfig {path} ({type(exc).__name__}: {exc}); check its current-context, "
            "cluster and user entries"
        ) from exc
    return context, cluster, user
