"""Guest-tier fixtures: the guest image, the real control plane + the running operator, and booted guests.

The control plane fixture is the integration tier's own (loaded from tests/integration/conftest.py), so the
user data these guests boot with is exactly what the running operator wrote into the cloud-init Secret.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.integration import conftest as integration_conftest

_TESTS = Path(__file__).resolve().parents[1]
_REPO = _TESTS.parent

control_plane = integration_conftest.control_plane

GUEST_DIR = _REPO / ".envtest" / "guest"
REPORTS_DIR = GUEST_DIR / "reports"


@pytest.fixture(scope="session")
def guest_image() -> Path:
    """The cached Debian guest image (``make guest-image`` builds it; this reuses it when warm)."""
    done = subprocess.run(
        [str(_REPO / "tools" / "guest" / "image.sh")],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(f"tools/guest/image.sh failed:\n{done.stderr[-3000:]}", pytrace=False)
    image = GUEST_DIR / "debian-12.qcow2"
    assert image.is_file(), done.stderr
    return image
