"""Test the lower bounds of pyproject.toml's runtime dependencies: the unit tier on exactly the floors.

Every runtime dependency must be declared ``name>=FLOOR``; a throwaway venv under
~/.cache/uds-vm-operator/floors-<hash of pyproject.toml>/ gets ``name==FLOOR`` for each (from PyPI, through
uv's cache) plus the dev tools, the installed versions are checked to be the floors, and the unit tier runs
there. Deselected (``EXCLUDED``): ``tests/unit/test_compliance_oscal.py`` (compliance-trestle, a dev tool,
needs a newer pydantic than our floor) and ``tests/unit/test_images_prep_schemas.py`` (prep's manifests
against the CDI and Zarf schemas). Every other unit test runs, the other schema tests
(``test_render_upstream_schemas.py``, ``test_zarf_package.py``) included.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path.home() / ".cache" / "uds-vm-operator"
EXCLUDED = [
    "--deselect",
    "tests/unit/test_compliance_oscal.py",
    "--deselect",
    "tests/unit/test_images_prep_schemas.py",
]


def floors() -> dict[str, str]:
    """``{name: floor}`` from pyproject.toml; a dependency without a ``>=`` floor is an error."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    result: dict[str, str] = {}
    for text in project["dependencies"]:
        req = Requirement(text)
        lows = [spec.version for spec in req.specifier if spec.operator == ">="]
        if len(lows) != 1:
            raise SystemExit(f"{text}: a runtime dependency needs exactly one >= floor")
        result[req.name] = lows[0]
    return result


def main() -> int:
    """Build (or reuse) the floor venv, check its versions, run the unit tier in it."""
    pins = floors()
    key = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()[:16]
    venv = CACHE / f"floors-{key}"
    python = venv / "bin/python"
    stamp = venv / ".installed"
    if not stamp.exists():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        constraints = venv / "floors.txt"
        constraints.write_text("".join(f"{name}=={version}\n" for name, version in pins.items()))
        uv = [sys.executable, "-m", "uv", "pip", "install", "--quiet", "--python", str(python)]
        subprocess.run([*uv, "-c", str(constraints), f"{ROOT}[dev]"], check=True)
        stamp.touch()
    else:
        # The dependencies are cached with the venv; the package itself is this checkout's, every run.
        uv = [sys.executable, "-m", "uv", "pip", "install", "--quiet", "--python", str(python)]
        subprocess.run([*uv, "--no-deps", "--reinstall-package", "uds-vm-operator", str(ROOT)], check=True)
    probe = (
        "import importlib.metadata as m, json, sys; "
        "print(json.dumps({n: m.version(n) for n in "
        "sys.argv[1:]}))"
    )
    installed = json.loads(subprocess.run([str(python), "-c", probe, *pins], check=True, capture_output=True,
                                          text=True).stdout)  # fmt: skip
    wrong = {n: v for n, v in installed.items() if v.split("+")[0] not in {pins[n], pins[n] + ".0"}}
    if wrong:
        raise SystemExit(f"the floor venv holds {wrong}, not the floors {pins}")
    print(f"floors: {' '.join(f'{n}=={v}' for n, v in installed.items())}", flush=True)
    # The package is installed (not editable) in the floor venv: tests import it from there, not from src/.
    args = [
        str(python),
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "tests/unit",
        *EXCLUDED,
        *sys.argv[1:],
    ]
    return subprocess.run(args, cwd=ROOT, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
