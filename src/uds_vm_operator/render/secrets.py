"""The generated Windows Administrator password and its Secret.

The password exists only in Secrets (this one and the sysprep Secret that carries the unattend file): never
in the VM spec, the UDSVirtualMachine, its status, Events or logs. Rotation = replacing the Secret.
"""

from __future__ import annotations

import base64
import secrets
import string
from typing import Any

from uds_vm_operator.child_names import admin_secret_name
from uds_vm_operator.render.common import ROLE_LABEL, Owner, child_metadata

ADMIN_PASSWORD_KEY = "password"
ADMIN_USERNAME_KEY = "username"
ADMIN_USERNAME = "Administrator"
PASSWORD_LENGTH = 32
_ALPHABET = string.ascii_letters + string.digits + "-_.!#%+="
# 32 characters from a 70-symbol alphabet: 32 * log2(70) ~ 196 bits, well above the required 128.


def generate_admin_password() -> str:
    """Return a random password with >= 128 bits of entropy that meets Windows complexity rules.

    The only non-pure helper of ``render``: the controller calls it once, when no ``<name>-admin`` Secret
    exists yet, and stores the result; afterwards it reads the Secret, so rendering stays deterministic.
    """
    while True:
        candidate = "".join(secrets.choice(_ALPHABET) for _ in range(PASSWORD_LENGTH))
        # Windows complexity: three of the four classes. Demand all four so every policy accepts it.
        if (
            any(c.islower() for c in candidate)
            and any(c.isupper() for c in candidate)
            and any(c.isdigit() for c in candidate)
            and any(not c.isalnum() for c in candidate)
        ):
            return candidate


def encode_secret_data(values: dict[str, str]) -> dict[str, str]:
    """Base64-encode Secret values into ``data``.

    ``stringData`` is write-only (the API server folds it into ``data``), so a reconcile comparing desired
    with live state would see a difference forever; ``data`` round-trips and keeps resyncs write-free.
    """
    return {key: base64.b64encode(value.encode()).decode("ascii") for key, value in sorted(values.items())}


def render_admin_secret(owner: Owner, password: str) -> dict[str, Any]:
    """The owned Secret ``<name>-admin`` holding the generated Administrator password."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": child_metadata(
            owner, admin_secret_name(owner.name), labels={ROLE_LABEL: "admin-credentials"}
        ),
        "type": "Opaque",
        "data": encode_secret_data({ADMIN_USERNAME_KEY: ADMIN_USERNAME, ADMIN_PASSWORD_KEY: password}),
    }
