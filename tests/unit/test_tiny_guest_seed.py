"""tools/guest/tiny/seed: how the tiny test guest reads the operator's #cloud-config (users, keys, hostname).

The guest runs it under busybox; here it runs under the host's sh and awk on the same rendered document, so a
change to the renderer's layout that the few lines of shell would misread fails here first."""

from __future__ import annotations

import subprocess
from pathlib import Path

from uds_vm_operator.api import UDSVirtualMachineSpec
from uds_vm_operator.render.cloudinit import render_user_data
from uds_vm_operator.render.common import Owner

SEED = Path(__file__).resolve().parents[2] / "tools" / "guest" / "tiny" / "seed"
KEY_A = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA0000000000000000000000000000000000000000000 ops@laptop"
KEY_B = "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTY= ops@desk"
KEY_C = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB1111111111111111111111111111111111111111111 audit"


def seed(tmp_path: Path, *args: str, user_data: str, meta_data: str = "") -> str:
    (tmp_path / "user-data").write_text(user_data)
    (tmp_path / "meta-data").write_text(meta_data)
    done = subprocess.run(
        ["sh", str(SEED), *args, str(tmp_path / "user-data"), str(tmp_path / "meta-data")],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return done.stdout


def rendered(users: list[dict[str, object]], **cloud_init: object) -> str:
    spec = UDSVirtualMachineSpec.model_validate(
        {
            "source": {"http": {"url": "https://images.example/t.qcow2", "checksum": "sha256:" + "0" * 64}},
            "cloudInit": {"flavor": "debian", "users": users, **cloud_init},
        }
    )
    return render_user_data(Owner("web-0", "apps", "0000"), spec)


def test_each_declared_key_of_each_user_is_one_line(tmp_path: Path) -> None:
    document = rendered(
        [
            {"name": "ops", "sshAuthorizedKeys": [KEY_A, KEY_B], "sudo": True},
            {"name": "audit", "sshAuthorizedKeys": [KEY_C]},
        ]
    )
    lines = [line.split("\t") for line in seed(tmp_path, "users", user_data=document).splitlines()]
    assert lines == [
        ["ops", "/bin/bash", KEY_A],
        ["ops", "/bin/bash", KEY_B],
        ["audit", "/bin/bash", KEY_C],
    ], document


def test_the_hardening_around_the_users_is_not_read_as_users(tmp_path: Path) -> None:
    """write_files, runcmd and the distribution's `default` user are not accounts with keys."""
    document = rendered([{"name": "ops", "sshAuthorizedKeys": [KEY_A]}], packages=["hello"])
    assert "write_files:" in document and "- default" in document
    out = seed(tmp_path, "users", user_data=document)
    assert out.splitlines() == [f"ops\t/bin/bash\t{KEY_A}"], out


def test_quoted_values_and_a_user_without_keys(tmp_path: Path) -> None:
    document = (
        "#cloud-config\nusers:\n- name: 'svc'\n  shell: \"/bin/sh\"\n- name: ops\n  ssh_authorized_keys:\n"
        f"  - '{KEY_A}'\nruncmd:\n- echo hi\n"
    )
    assert seed(tmp_path, "users", user_data=document).splitlines() == [
        "svc\t/bin/sh\t",
        f"ops\t/bin/sh\t{KEY_A}",
    ]


def test_the_hostname_comes_from_user_data_else_meta_data(tmp_path: Path) -> None:
    assert seed(tmp_path, "hostname", user_data=rendered([])).strip() == "web-0"
    kubevirt = '{"instance-id": "web-0.apps", "local-hostname": "from-meta"}'  # KubeVirt's meta-data is JSON
    assert seed(tmp_path, "hostname", user_data="#cloud-config\n", meta_data=kubevirt).strip() == "from-meta"
    yaml = "instance-id: x\nlocal-hostname: from-yaml\n"
    assert seed(tmp_path, "hostname", user_data="#cloud-config\n", meta_data=yaml).strip() == "from-yaml"
