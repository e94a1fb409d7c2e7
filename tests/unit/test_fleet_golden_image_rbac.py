"""`uds-vmctl golden-image rbac`: clone-only access for consumers, quota on the golden storage class."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from uds_vm_operator.cli.goldenimage import (
    CLONER_ROLE,
    STORAGE_GUARD_QUOTA,
    GoldenImageUsageError,
    golden_image_manifests,
)
from uds_vm_operator.cli.main import app

WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection", "*"}


def by_kind(manifests):  # type: ignore[no-untyped-def]
    out: dict = {}  # type: ignore[type-arg]
    for manifest in manifests:
        out.setdefault(manifest["kind"], []).append(manifest)
    return out


def test_role_grants_clone_rights_and_no_write_on_real_objects():
    kinds = by_kind(golden_image_manifests("golden", ["team-a"]))
    (role,) = kinds["Role"]
    assert role["metadata"] == {**role["metadata"], "name": CLONER_ROLE, "namespace": "golden"}
    for rule in role["rules"]:
        writes = WRITE_VERBS & set(rule["verbs"])
        if writes:
            assert rule == {
                "apiGroups": ["cdi.kubevirt.io"],
                "resources": ["datavolumes/source"],
                "verbs": ["create"],
            }
        assert "*" not in rule["resources"] and "*" not in rule["apiGroups"]


def test_binding_covers_every_consumer_namespace_and_the_operator():
    kinds = by_kind(golden_image_manifests("golden", ["team-b", "team-a", "team-a"]))
    (binding,) = kinds["RoleBinding"]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": CLONER_ROLE,
    }
    assert binding["subjects"] == [
        {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "system:serviceaccounts:team-a"},
        {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "system:serviceaccounts:team-b"},
    ]
    with_operator = golden_image_manifests(
        "golden", ["team-a"], service_accounts=["uds-vm-operator/uds-vm-operator"]
    )
    assert by_kind(with_operator)["RoleBinding"][0]["subjects"][-1] == {
        "kind": "ServiceAccount",
        "name": "uds-vm-operator",
        "namespace": "uds-vm-operator",
    }


def test_image_namespace_is_labelled_and_comes_first():
    manifests = golden_image_manifests("golden", ["team-a"])
    assert manifests[0]["kind"] == "Namespace"
    assert manifests[0]["metadata"]["labels"]["uds.dev/golden-images"] == "true"


def test_quota_keeps_each_consumer_off_the_golden_storage_class():
    kinds = by_kind(
        golden_image_manifests("golden", ["team-a", "team-b"], storage_class="golden-sc", quota=True)
    )
    quotas = kinds["ResourceQuota"]
    assert [q["metadata"]["namespace"] for q in quotas] == ["team-a", "team-b"]
    for quota in quotas:
        assert quota["metadata"]["name"] == STORAGE_GUARD_QUOTA
        assert quota["spec"]["hard"] == {
            "golden-sc.storageclass.storage.k8s.io/requests.storage": "0",
            "golden-sc.storageclass.storage.k8s.io/persistentvolumeclaims": "0",
        }


def test_no_quota_unless_asked():
    assert "ResourceQuota" not in by_kind(golden_image_manifests("golden", ["team-a"]))


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        (("golden", []), {}, "--consumer-namespace"),
        (("Golden", ["team-a"]), {}, "--image-namespace"),
        (("golden", ["team_a"]), {}, "--consumer-namespace"),
        (("golden", ["golden"]), {}, "both the image namespace and a consumer"),
        (("golden", ["team-a"]), {"quota": True}, "--quota needs --storage-class"),
        (("golden", ["team-a"]), {"storage_class": "sc"}, "add --quota"),
        (("golden", ["team-a"]), {"storage_class": "Bad SC", "quota": True}, "not a storage class"),
        (("golden", ["team-a"]), {"service_accounts": ["justaname"]}, "NAMESPACE/NAME"),
    ],
)
def test_bad_options_are_usage_errors(args, kwargs, message):  # type: ignore[no-untyped-def]
    with pytest.raises(GoldenImageUsageError, match=None) as caught:
        golden_image_manifests(*args, **kwargs)
    assert message in str(caught.value)


def test_cli_prints_yaml_that_round_trips():
    result = CliRunner().invoke(
        app, ["golden-image", "rbac", "--image-namespace", "golden", "--consumer-namespace", "team-a"]
    )
    assert result.exit_code == 0, result.output
    docs = list(yaml.safe_load_all(result.stdout))
    assert [d["kind"] for d in docs] == ["Namespace", "Role", "RoleBinding"]
    subjects = docs[2]["subjects"]
    assert {"kind": "ServiceAccount", "name": "uds-vm-operator", "namespace": "uds-vm-operator"} in subjects


def test_cli_writes_the_output_file(tmp_path: Path):
    target = tmp_path / "golden.yaml"
    result = CliRunner().invoke(
        app,
        [
            "golden-image",
            "rbac",
            "--image-namespace",
            "golden",
            "--consumer-namespace",
            "team-a",
            "--storage-class",
            "golden-sc",
            "--quota",
            "--output",
            str(target),
        ],
    )
    assert result.exit_code == 0, result.output
    assert [d["kind"] for d in yaml.safe_load_all(target.read_text())][-1] == "ResourceQuota"


def test_cli_usage_error_exits_2_without_traceback():
    result = CliRunner().invoke(
        app,
        ["golden-image", "rbac", "--image-namespace", "golden", "--consumer-namespace", "team-a", "--quota"],
    )
    assert result.exit_code == 2
    assert "--storage-class" in result.output
    assert "Traceback" not in result.output


def test_cli_unwritable_output_is_a_usage_error(tmp_path: Path):
    result = CliRunner().invoke(
        app,
        [
            "golden-image",
            "rbac",
            "--image-namespace",
            "golden",
            "--consumer-namespace",
            "team-a",
            "--output",
            str(tmp_path / "no" / "x.yaml"),
        ],
    )
    assert result.exit_code == 2
    assert "cannot write" in result.output
