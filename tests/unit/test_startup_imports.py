"""What the operator's start-up imports: only what the first reconcile needs (a fresh interpreter each).

Cold start is a measured goal (``bench/operator_startup.py``): every module imported before the first
reconcile is read from disk on a pod's first start. These tests pin the lazy boundaries so a convenient
top-level import cannot quietly undo them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from typing import Any


def run_fresh(code: str) -> Any:
    """Run ``code`` in a fresh interpreter; return the JSON value its last line of output printed."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def imported_after(code: str, candidates: list[str]) -> list[str]:
    """Which of ``candidates`` are in ``sys.modules`` after ``code`` ran in a fresh interpreter."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps([m for m in {candidates!r} if m in sys.modules]))"
    return list(run_fresh(probe))


def test_the_argument_parser_imports_no_runtime_library() -> None:
    heavy = ["kopf", "aiohttp", "pydantic", "prometheus_client", "lightkube", "yaml"]
    code = "from uds_vm_operator.operator_main import build_parser\nbuild_parser()"
    assert imported_after(code, heavy) == []


def test_the_vm_controller_process_leaves_other_features_unimported() -> None:
    elsewhere = [
        "uds_vm_operator.controller.pool",  # only with --controllers pool
        "uds_vm_operator.fleet",
        "uds_vm_operator.api.pool",
        "uds_vm_operator.api.crdgen",
        "uds_vm_operator.compliance",
        "uds_vm_operator.images",
        "uds_vm_operator.cli",
        "lightkube",  # the fallback transport, for exec-plugin kubeconfigs only
        "httpx2",
    ]
    assert imported_after("import uds_vm_operator.controller.process", elsewhere) == []


def test_both_controllers_start_without_the_verifier_windows_or_package_metadata_code() -> None:
    """What ``run`` with both controllers needs before its first reconcile, and no more of these."""
    code = """
        from uds_vm_operator.operator_main import build_parser
        build_parser().parse_args(["run", "--standalone"])
        import uds_vm_operator.controller.process
        import uds_vm_operator.controller.pool
        from uds_vm_operator.runtime.kopf_integration import check_kopf_version
        check_kopf_version()
    """
    unneeded = [
        "uds_vm_operator.verify.core",  # the verifier pod's hashing: `verify-disk` only
        "uds_vm_operator.verify.reader",
        "xml.sax",  # Windows answer files: rendered only for a Windows VM
        "importlib.metadata",  # kopf's version: kopf.__version__ has it
    ]
    assert imported_after(textwrap.dedent(code), unneeded) == []


def test_the_verify_package_still_offers_every_public_name() -> None:
    names = run_fresh(
        """
        import json
        import uds_vm_operator.verify as verify
        print(json.dumps({name: callable(getattr(verify, name)) for name in verify.__all__}))
        """
    )
    assert names and all(names.values())
    assert "verify_disk" in names and "parse_digest" in names


def test_no_model_validator_is_built_until_a_spec_is_parsed() -> None:
    built = run_fresh(
        """
        import json
        import uds_vm_operator.controller.process
        from uds_vm_operator.api import models

        def built():
            return sorted(
                name for name, value in vars(models).items()
                if isinstance(value, type) and issubclass(value, models.ApiModel)
                and value.__pydantic_complete__
            )

        at_import = built()
        models.parse_vm_spec({"source": {"upload": {}}, "disk": {"virtualSize": "1Gi"}})
        print(json.dumps({"at_import": at_import, "after_parse": built()}))
        """
    )
    assert built["at_import"] == []
    assert "UDSVirtualMachineSpec" in built["after_parse"]
    assert "UDSVirtualMachineStatus" not in built["after_parse"]  # the operator writes status as dicts


def test_a_deferred_model_validates_and_refuses_on_first_use() -> None:
    outcome = run_fresh(
        """
        import json
        from uds_vm_operator.api.models import SpecError, parse_vm_spec

        spec = parse_vm_spec({"source": {"upload": {}}, "disk": {"virtualSize": "1Gi"}})
        try:
            parse_vm_spec({"source": {"upload": {}}, "bogus": 1})
            refused = ""
        except SpecError as error:
            refused = str(error)
        print(json.dumps({"size": spec.disk.virtual_size, "refused": refused}))
        """
    )
    assert outcome["size"] == "1Gi"
    assert outcome["refused"].startswith("spec.bogus: unknown field")
