"""The operator's environment as the container image sets it, for benchmarks that start the operator.

A developer shell (this machine's included) often exports ``SSL_CERT_FILE``/``SSL_CERT_DIR``; the image
does not. With them set, ``runtime/trust.py`` leaves the system CA bundle in every default SSL context
(the user's choice wins), which costs ~2 MiB of RSS and ~30 ms of start-up the pod never pays.
"""

from __future__ import annotations

from collections.abc import Mapping

IMAGE_UNSET = ("SSL_CERT_FILE", "SSL_CERT_DIR")


def image_environment(base: Mapping[str, str]) -> dict[str, str]:
    """``base`` without the variables the image does not set."""
    return {name: value for name, value in base.items() if name not in IMAGE_UNSET}
