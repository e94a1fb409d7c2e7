"""Shared by the integration tests that render the chart: the pinned helm binary (built if needed)."""

from __future__ import annotations

import subprocess
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@cache
def helm_path() -> str:
    result = subprocess.run([str(ROOT / "tools/helm/build.sh")], capture_output=True, text=True, check=False)
    assert result.returncode == 0, (
        f"helm could not be built (needs Go >= 1.26.8; tools/helm/build.sh): {result.stderr}"
    )
    return result.stdout.strip()
