"""The unit tests' real S3 store: the shared gateway (tests/s3_gateway.py) on a loopback port, one per module.

A helper, not tests. A gateway that cannot be built or started fails the tests, never skips them. The
fixtures ``gateway`` and ``bucket`` (``gateway_fixture``, ``bucket_fixture``) are imported by the modules that
talk to it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.s3_gateway import ACCESS_KEY, SECRET_KEY, Gateway
from tests.s3_gateway import running_gateway as _running_gateway

__all__ = ["ACCESS_KEY", "SECRET_KEY", "Gateway", "bucket_fixture", "gateway_fixture", "running_gateway"]


@contextmanager
def running_gateway(workdir: Path) -> Iterator[Gateway]:
    """The gateway on a free loopback port over ``workdir/root``; a failure to start fails the test."""
    try:
        context = _running_gateway(workdir)
        started = context.__enter__()
    except RuntimeError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield started
    finally:
        context.__exit__(None, None, None)


@pytest.fixture(scope="module", name="gateway")
def gateway_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """One gateway per test module."""
    with running_gateway(tmp_path_factory.mktemp("s3")) as running:
        yield running


@pytest.fixture(name="bucket")
def bucket_fixture(gateway: Gateway) -> str:
    """A bucket no other test uses."""
    return gateway.new_bucket()
