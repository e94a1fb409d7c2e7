"""Image tier fixtures: reference images made by the real qemu-img (see ``qemu_reference``)."""

from __future__ import annotations

from tests.images.qemu_reference import reference_images

__all__ = ["reference_images"]
