"""Guest-tier fixtures: the guest image, the real control plane + the running operator, and booted guests.

The control plane fixture is the integration tier's own (loaded from tests/integration/conftest.py), so the
user data these guests boot with is exactly what the running operator wrote into the cloud-init Secret.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.guest.guest_machine import built_image
from tests.integration import conftest as integration_conftest

_TESTS = Path(__file__).resolve().parents[1]
_REPO = _TESTS.parent

control_plane = integration_conftest.control_plane

GUEST_DIR = _REPO / ".envtest" / "guest"
REPORTS_DIR = GUEST_DIR / "reports"


@pytest.fixture(scope="session")
def guest_image() -> Path:
    """The cached Debian guest image (``make guest-image`` builds it; this reuses it when warm)."""
    return built_image("image.sh", "debian-12.qcow2", timeout_s=1800)


@pytest.fixture(scope="session")
def tiny_image() -> Path:
    """The cached tiny test guest (``make tiny-guest-image``; tests/guest/test_tiny_guest.py)."""
    return built_image("tiny-image.sh", "tiny.qcow2", timeout_s=1800)
