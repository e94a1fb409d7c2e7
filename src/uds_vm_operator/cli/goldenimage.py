"""``uds-vmctl golden-image rbac``: the manifests of a protected golden-image namespace.

Golden images live in one namespace that ordinary namespaces may clone from but never write to (SPEC §10,
CDI's ``doc/RBAC.md``). A cross-namespace clone needs ``create`` on the virtual subresource
``cdi.kubevirt.io/datavolumes/source`` in the *image* namespace; that verb creates nothing there, so the
RoleBinding below gives consumers clone rights and nothing else. Optionally a ResourceQuota in every
consumer namespace keeps it off the golden storage class (``requests.storage: 0`` for that class).

The manifest builder is a pure function; the command only writes YAML.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from uds_vm_operator import MANAGED_BY_LABEL
from uds_vm_operator.cli._errors import UsageError
from uds_vm_operator.cli._output import write_file
from uds_vm_operator.names import is_dns_label, is_dns_subdomain

CLONER_ROLE = "golden-image-cloner"
STORAGE_GUARD_QUOTA = "golden-image-storage-guard"
GOLDEN_NAMESPACE_LABEL = "uds.dev/golden-images"
GUARD_LABEL = "uds.dev/golden-image-guard"
"""On consumer quotas: the golden-image namespace whose storage class they guard."""
DEFAULT_OPERATOR_SERVICE_ACCOUNT = "uds-vm-operator/uds-vm-operator"


class GoldenImageUsageError(UsageError, ValueError):
    """The options do not describe a valid golden-image setup; the message says which and how to fix it.

    A :class:`UsageError` for the CLI (exit 2), and a ``ValueError`` for callers of the pure builder.
    """


def _check_namespace(value: str, option: str) -> None:
    if not is_dns_label(value):
        raise GoldenImageUsageError(
            f"{option} {value!r} is not a namespace name (lower-case letters, digits and '-', "
            "at most 63 characters)"
        )


def _service_account_subject(value: str) -> dict[str, str]:
    namespace, _, name = value.partition("/")
    if not name:
        raise GoldenImageUsageError(
            f"--service-account {value!r}: write NAMESPACE/NAME, e.g. {DEFAULT_OPERATOR_SERVICE_ACCOUNT}"
        )
    _check_namespace(namespace, "--service-account namespace")
    if not is_dns_subdomain(name):
        raise GoldenImageUsageError(f"--service-account {value!r}: {name!r} is not a service account name")
    return {"kind": "ServiceAccount", "name": name, "namespace": namespace}


def golden_image_manifests(
    image_namespace: str,
    consumer_namespaces: Sequence[str],
    *,
    storage_class: str | None = None,
    quota: bool = False,
    service_accounts: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """Build the Namespace, clone Role/RoleBinding and (with ``quota``) consumer ResourceQuotas.

    Consumers are bound as the group ``system:serviceaccounts:<namespace>`` (every service account of that
    namespace, which is what a workload or GitOps controller there runs as); ``service_accounts`` adds
    more subjects such as the operator's own account, which creates the clone DataVolumes for
    UDSVirtualMachines. Raises :class:`GoldenImageUsageError` on options that make no sense.
    """
    _check_namespaces(image_namespace, consumer_namespaces)
    _check_storage_guard(storage_class, quota=quota)
    consumers = sorted(set(consumer_namespaces))
    extra_subjects = [_service_account_subject(value) for value in dict.fromkeys(service_accounts)]
    labels = {**MANAGED_BY_LABEL, GOLDEN_NAMESPACE_LABEL: "true"}

    manifests: list[dict[str, Any]] = [
        _image_namespace(image_namespace, labels),
        _cloner_role(image_namespace, labels),
        _cloner_binding(image_namespace, labels, consumers, extra_subjects),
    ]
    if quota and storage_class:
        manifests.extend(_storage_guard_quotas(image_namespace, consumers, storage_class))
    return manifests


def _check_namespaces(image_namespace: str, consumer_namespaces: Sequence[str]) -> None:
    """Refuse an invalid image namespace, no or invalid consumers, and an image namespace among them."""
    _check_namespace(image_namespace, "--image-namespace")
    if not consumer_namespaces:
        raise GoldenImageUsageError(
            "give at least one --consumer-namespace (the namespaces that clone images)"
        )
    for consumer in consumer_namespaces:
        _check_namespace(consumer, "--consumer-namespace")
    if image_namespace in consumer_namespaces:
        raise GoldenImageUsageError(
            f"{image_namespace!r} is both the image namespace and a consumer; "
            "consumers are the other namespaces"
        )


def _check_storage_guard(storage_class: str | None, *, quota: bool) -> None:
    """Refuse ``--quota`` and ``--storage-class`` one without the other, and a bad storage class name."""
    if quota and not storage_class:
        raise GoldenImageUsageError(
            "--quota needs --storage-class (the golden storage class to keep consumers off)"
        )
    if storage_class and not quota:
        raise GoldenImageUsageError("--storage-class only makes sense with --quota; add --quota")
    if storage_class and not is_dns_subdomain(storage_class):
        raise GoldenImageUsageError(f"--storage-class {storage_class!r} is not a storage class name")


def _image_namespace(image_namespace: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": image_namespace,
            "labels": {**labels, "kubernetes.io/metadata.name": image_namespace},
        },
    }


def _cloner_role(image_namespace: str, labels: dict[str, str]) -> dict[str, Any]:
    """Clone rights in the image namespace and read-only discovery of its DataSources; no write."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": CLONER_ROLE, "namespace": image_namespace, "labels": labels},
        "rules": [
            # Clone rights: the subresource CDI checks for a cross-namespace clone (writes nothing).
            {"apiGroups": ["cdi.kubevirt.io"], "resources": ["datavolumes/source"], "verbs": ["create"]},
            # Read-only discovery of what can be cloned.
            {
                "apiGroups": ["cdi.kubevirt.io"],
                "resources": ["datasources"],
                "verbs": ["get", "list", "watch"],
            },
        ],
    }


def _cloner_binding(
    image_namespace: str,
    labels: dict[str, str],
    consumers: Sequence[str],
    extra_subjects: list[dict[str, str]],
) -> dict[str, Any]:
    """Bind the cloner Role to every service account of each consumer namespace, then the extra subjects."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": CLONER_ROLE, "namespace": image_namespace, "labels": labels},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": CLONER_ROLE},
        "subjects": [
            {
                "kind": "Group",
                "apiGroup": "rbac.authorization.k8s.io",
                "name": f"system:serviceaccounts:{ns}",
            }
            for ns in consumers
        ]
        + extra_subjects,
    }


def _storage_guard_quotas(
    image_namespace: str, consumers: Sequence[str], storage_class: str
) -> list[dict[str, Any]]:
    """One ResourceQuota per consumer that allows no storage and no claim on the golden storage class."""
    prefix = f"{storage_class}.storageclass.storage.k8s.io"
    return [
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {
                "name": STORAGE_GUARD_QUOTA,
                "namespace": consumer,
                "labels": {**MANAGED_BY_LABEL, GUARD_LABEL: image_namespace},
            },
            "spec": {"hard": {f"{prefix}/requests.storage": "0", f"{prefix}/persistentvolumeclaims": "0"}},
        }
        for consumer in consumers
    ]


def to_yaml(manifests: Sequence[dict[str, Any]]) -> str:
    """Multi-document YAML, keys in the order written (readable in review)."""
    return "---\n".join(yaml.safe_dump(manifest, sort_keys=False) for manifest in manifests)


def register(app: typer.Typer) -> None:
    """Attach ``golden-image rbac`` to the CLI app."""
    group = typer.Typer(
        help="Protected golden-image namespaces: clone-only access for consumers.", no_args_is_help=True
    )

    @group.command("rbac")
    def rbac_command(
        *,
        image_namespace: Annotated[
            str, typer.Option("--image-namespace", help="Namespace holding the golden images.")
        ],
        consumer_namespaces: Annotated[
            list[str],
            typer.Option("--consumer-namespace", help="Namespace allowed to clone (repeat for several)."),
        ],
        storage_class: Annotated[
            str | None,
            typer.Option(
                "--storage-class", help="Golden storage class consumers must not use (with --quota)."
            ),
        ] = None,
        quota: Annotated[
            bool, typer.Option("--quota", help="Add a ResourceQuota per consumer: 0 bytes on that class.")
        ] = False,
        service_accounts: Annotated[
            list[str] | None,
            typer.Option(
                "--service-account",
                help="Extra subject NAMESPACE/NAME allowed to clone "
                f"(default: {DEFAULT_OPERATOR_SERVICE_ACCOUNT}, the operator).",
            ),
        ] = None,
        output: Annotated[
            Path | None, typer.Option("--output", "-o", help="Write the YAML here instead of stdout.")
        ] = None,
    ) -> None:
        """Print the manifests of a golden-image namespace that consumers may clone from but not write to."""
        manifests = golden_image_manifests(
            image_namespace,
            consumer_namespaces,
            storage_class=storage_class,
            quota=quota,
            service_accounts=service_accounts or [DEFAULT_OPERATOR_SERVICE_ACCOUNT],
        )
        text = to_yaml(manifests)
        if output is None:
            typer.echo(text, nl=False)
            return
        write_file(output, text, option="--output")
        typer.echo(f"wrote {len(manifests)} manifests to {output}", err=True)

    app.add_typer(group, name="golden-image")
