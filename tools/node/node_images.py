"""The node's own images, made here without any registry outside: pause, CoreDNS and a busybox for probes.

Each is `FROM scratch` plus static binaries: pause compiled from the `k8s.io/kubernetes` module's own source
(build/pause/linux/pause.c), CoreDNS from tools/node/build.sh, busybox from Debian's busybox-static. They are
built once into buildah's local storage under a name carrying the hash of their inputs, then pushed into the
node's loopback registry, where containerd pulls them as it would from Zarf's registry at an air-gapped site.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

PAUSE_TAG = "3.10"
BUSYBOX_APPLETS = (
    "sh",
    "nc",
    "wget",
    "httpd",
    "nslookup",
    "sleep",
    "cat",
    "echo",
    "ls",
    "timeout",
    "id",
    "dd",
    "sha256sum",
)


class ImageBuildError(RuntimeError):
    """An image could not be built or pushed; the message names the step and how to fix it."""


def buildah_env() -> dict[str, str]:
    """vfs storage: works on every kernel and in nested sandboxes; every builder on the machine must agree."""
    return {**os.environ, "STORAGE_DRIVER": "vfs", "BUILDAH_ISOLATION": "chroot"}


def _buildah(*args: str, capture: bool = True) -> str:
    result = subprocess.run(
        ["buildah", *args], capture_output=True, text=True, env=buildah_env(), check=False
    )
    if result.returncode != 0:
        raise ImageBuildError(f"buildah {' '.join(args)} failed: {result.stderr.strip()[-2000:]}")
    return result.stdout.strip()


def _local_image_exists(name: str) -> bool:
    result = subprocess.run(
        ["buildah", "inspect", "--type", "image", name], capture_output=True, env=buildah_env(), check=False
    )
    return result.returncode == 0


def _file_digest(*paths: Path) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


@dataclass(frozen=True)
class StaticImage:
    """An image of static files: (source on the host, path in the image), plus its entrypoint."""

    repository: str
    tag: str
    files: tuple[tuple[Path, str], ...]
    entrypoint: tuple[str, ...]
    links: tuple[tuple[str, str], ...] = ()

    @property
    def local_name(self) -> str:
        inputs = "|".join(f"{dest}:{_file_digest(src)}" for src, dest in self.files)
        inputs += "|" + " ".join(self.entrypoint) + "|" + repr(self.links)
        key = hashlib.sha256(inputs.encode()).hexdigest()[:16]
        return f"localhost/uds-node-cache/{self.repository.replace('/', '-')}:{key}"


def build_static_image(image: StaticImage) -> str:
    """Build into buildah's storage unless an image with the same inputs is already there; return its name."""
    name = image.local_name
    if _local_image_exists(name):
        return name
    container = _buildah("from", "scratch")
    try:
        with tempfile.TemporaryDirectory(prefix="uds-node-image-") as staging:
            root = Path(staging)
            for source, dest in image.files:
                target = root / dest.lstrip("/")
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, target)
            for link, points_to in image.links:
                target = root / link.lstrip("/")
                target.parent.mkdir(parents=True, exist_ok=True)
                target.symlink_to(points_to)
            (root / "tmp").mkdir(exist_ok=True)
            _buildah("copy", container, f"{root}/.", "/")
        _buildah(
            "config", "--entrypoint", repr(list(image.entrypoint)).replace("'", '"'), "--cmd", "", container
        )
        _buildah("commit", "--quiet", container, name)
    finally:
        subprocess.run(["buildah", "rm", container], capture_output=True, env=buildah_env(), check=False)
    return name


def push(local_name: str, registry: str, repository: str, tag: str) -> str:
    """Push into the loopback registry (plain HTTP); return the pullable reference with its digest."""
    with tempfile.NamedTemporaryFile(prefix="uds-digest-") as digest_file:
        _buildah(
            "push",
            "--quiet",
            "--tls-verify=false",
            "--digestfile",
            digest_file.name,
            local_name,
            f"docker://{registry}/{repository}:{tag}",
        )
        digest = Path(digest_file.name).read_text(encoding="ascii").strip()
    return f"{registry}/{repository}:{tag}@{digest}"


def compile_pause(source: Path, out_dir: Path) -> Path:
    """Kubernetes' own pause, compiled statically (gcc, libc6-dev) with its version string."""
    out_dir.mkdir(parents=True, exist_ok=True)
    binary = out_dir / f"pause-{_file_digest(source)}"
    if binary.is_file():
        return binary
    result = subprocess.run(
        [
            "gcc",
            "-Os",
            "-static",
            "-Wall",
            "-Werror",
            f"-DVERSION=v{PAUSE_TAG}",
            "-o",
            str(binary),
            str(source),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise ImageBuildError(f"compiling {source} failed (needs gcc and libc6-dev): {result.stderr.strip()}")
    subprocess.run(["strip", str(binary)], check=False)
    return binary


def pause_source(k8s_version: str) -> Path:
    """build/pause/linux/pause.c from the pinned k8s.io/kubernetes module (downloaded for kube-apiserver)."""
    modcache = subprocess.run(
        ["go", "env", "GOMODCACHE"], capture_output=True, text=True, check=False
    ).stdout.strip()
    source = Path(modcache) / f"k8s.io/kubernetes@{k8s_version}" / "build/pause/linux/pause.c"
    if not source.is_file():
        raise ImageBuildError(
            f"{source} not found; run `make envtest-bins` (it downloads k8s.io/kubernetes {k8s_version})"
        )
    return source


def node_images(
    bin_dir: Path, cache_dir: Path, k8s_version: str, coredns_version: str
) -> dict[str, StaticImage]:
    """The three images the node needs, keyed by role."""
    pause = compile_pause(pause_source(k8s_version), cache_dir)
    busybox = Path("/bin/busybox")
    if not busybox.is_file():
        raise ImageBuildError(
            "/bin/busybox missing; `apt-get install busybox-static` (tools/node/ensure-deps.sh)"
        )
    return {
        "pause": StaticImage("uds-node/pause", PAUSE_TAG, ((pause, "/pause"),), ("/pause",)),
        "coredns": StaticImage(
            "uds-node/coredns", coredns_version, ((bin_dir / "coredns", "/coredns"),), ("/coredns",)
        ),
        "busybox": StaticImage(
            "uds-test/busybox",
            "static",
            ((busybox, "/bin/busybox"),),
            ("/bin/busybox",),
            tuple((f"/bin/{applet}", "busybox") for applet in BUSYBOX_APPLETS),
        ),
    }
