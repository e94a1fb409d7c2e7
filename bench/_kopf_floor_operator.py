"""The least a kopf operator can do: the start-up floor ``fleet_anchor`` times beside ours (issue 19).

Not part of the product, and not a benchmark of its own (``bench.run`` skips names starting with ``_``).
It watches UDSVirtualMachines in one namespace with the same kopf settings ours starts with (standalone,
no cluster scanning, no posted Events, login from the kubeconfig), trusts only the cluster CA as ours does
(so it skips loading the system CA bundle, ~75 ms), and writes ``status.phase`` on the first event of a VM
that has none, through kopf's own patch. Whatever ours takes beyond this process's time is
ours to win back; what this process takes is the price of Python + kopf + aiohttp, which the project's
rules fix (kopf is the mandated operator framework).

    python bench/_kopf_floor_operator.py --kubeconfig FILE --namespace NS
"""

from __future__ import annotations

import argparse
import asyncio
import os
from typing import Any

from uds_vm_operator.runtime.trust import restrict_default_trust


def main() -> None:
    """Parse the two options ours is started with in the bench, then run kopf until SIGTERM."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--namespace", required=True)
    args = parser.parse_args()
    os.environ["KUBECONFIG"] = os.path.abspath(args.kubeconfig)
    restrict_default_trust(args.kubeconfig)  # before kopf imports aiohttp, as ours does
    import kopf  # noqa: PLC0415

    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry)
    async def login(**kwargs: Any) -> Any:
        return kopf.login_with_kubeconfig(**kwargs)

    @kopf.on.event("uds.dev/v1alpha1", "udsvirtualmachines", registry=registry)
    async def first_status(body: Any, patch: Any, **_: Any) -> None:
        if not (body.get("status") or {}).get("phase"):
            patch.status["phase"] = "Pending"

    settings = kopf.OperatorSettings()
    settings.posting.enabled = False
    settings.scanning.disabled = True
    settings.peering.standalone = True
    asyncio.run(
        kopf.operator(registry=registry, settings=settings, clusterwide=False, namespaces=[args.namespace])
    )


if __name__ == "__main__":
    main()
