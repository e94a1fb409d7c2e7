"""``uds-vmctl prep`` digest throughput against OpenSSL, coreutils and qemu-img on the same files, same run.

1. A 1 GiB raw file (warm page cache): ``uds-vmctl prep --json`` (the full path a user runs: inspection,
   file SHA-256 and, for raw, the content digest derived from the same pass) vs ``openssl dgst -sha256`` and
   ``sha256sum``. Runs are interleaved, five rounds, medians compared.
2. A 1 GiB qcow2 made from semi-random data with holes: our content digest (SHA-256 of the virtual disk) vs
   ``qemu-img convert -O raw SRC TMP && openssl dgst -sha256 TMP`` (qemu-img cannot convert to a pipe: it
   writes raw output sparsely with seeks, so a temporary file under /tmp is the honest anchor), plus the full
   ``uds-vmctl prep`` on the qcow2 (file digest + content digest).
Temporary files live under /tmp and are removed.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

GIB = 1 << 30
ROUNDS = 5
VENV_BIN = Path(sys.executable).parent


def _timed(command: list[str]) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    return time.perf_counter() - started, done.stdout


def _uds_vmctl() -> str:
    candidate = VENV_BIN / "uds-vmctl"
    found = str(candidate) if candidate.exists() else shutil.which("uds-vmctl")
    if not found:
        raise SystemExit("uds-vmctl not found: run `make install` first")
    return found


def _require(tool: str, package: str) -> None:
    if shutil.which(tool) is None:
        raise SystemExit(f"{tool} not found: install {package} (make system-deps)")


def _write_random(path: Path, size: int, hole_every: int = 0, seed: int = 7) -> None:
    """Random 1 MiB blocks; with ``hole_every``, block n%k==0 is a hole and n%k==1 is half zeros."""
    rng = random.Random(seed)
    block = 1 << 20
    with path.open("wb") as handle:
        for index in range(size // block):
            if hole_every and index % hole_every == 0:
                handle.seek(block, os.SEEK_CUR)
            elif hole_every and index % hole_every == 1:
                handle.write(rng.randbytes(block // 2) + bytes(block // 2))
            else:
                handle.write(os.urandom(block))
        handle.truncate(size)


def _warm(path: Path) -> None:
    with path.open("rb") as handle:
        while handle.read(16 << 20):
            pass


def _medians(samples: dict[str, list[float]]) -> dict[str, float]:
    return {name: round(statistics.median(values), 4) for name, values in samples.items()}


def _rounds(
    commands: dict[str, Callable[[], tuple[float, str]]],
) -> tuple[dict[str, list[float]], dict[str, str]]:
    samples: dict[str, list[float]] = {name: [] for name in commands}
    outputs: dict[str, str] = {}
    for _ in range(ROUNDS):
        for name, command in commands.items():
            seconds, output = command()
            samples[name].append(round(seconds, 4))
            outputs[name] = output
    return samples, outputs


# `prep` registered alone on a typer app: what `uds-vmctl prep` costs once cli/main.py imports command
# modules lazily (today it imports every command, and with them pydantic models and lightkube, first).
PREP_ONLY_APP = (
    "import sys, typer; from uds_vm_operator.cli import prep; app = typer.Typer(add_completion=False);"
    "app.callback()(lambda: None); prep.register(app); sys.argv[0] = 'uds-vmctl'; app()"
)


def _in_process(image: Path) -> tuple[float, str]:
    """The digest engine without process start-up: survey_image in this (already warm) interpreter."""
    from uds_vm_operator.images import survey_image  # noqa: PLC0415 (import cost is not what we time)

    started = time.perf_counter()
    survey = survey_image(str(image))
    return time.perf_counter() - started, survey.digests["sha256"]


def bench_raw(workdir: Path, prep: str) -> dict[str, Any]:
    """prep on 1 GiB raw vs openssl and sha256sum."""
    image = workdir / "bench-1GiB.raw"
    _write_random(image, GIB)
    _warm(image)
    samples, outputs = _rounds(
        {
            "prep": lambda: _timed([prep, "prep", "--json", str(image)]),
            "prep_only_app": lambda: _timed(
                [sys.executable, "-c", PREP_ONLY_APP, "prep", "--json", str(image)]
            ),
            "openssl_dgst_sha256": lambda: _timed(["openssl", "dgst", "-sha256", str(image)]),
            "sha256sum": lambda: _timed(["sha256sum", str(image)]),
            "cli_startup_version": lambda: _timed([prep, "version"]),
            "library_in_process": lambda: _in_process(image),
        }
    )
    report = json.loads(outputs["prep"])
    ours = report["sha256"].split(":", 1)[1]
    assert ours in outputs["openssl_dgst_sha256"] and ours in outputs["sha256sum"], "digests disagree"
    assert json.loads(outputs["prep_only_app"])["sha256"] == report["sha256"]
    assert f"sha256:{outputs['library_in_process']}" == report["sha256"]
    assert report["content_sha256"] == report["sha256"], "raw content digest must reuse the file digest"
    medians = _medians(samples)
    return {
        "file_bytes": GIB,
        "samples_s": samples,
        "median_s": medians,
        "ratio_prep_vs_openssl": round(medians["prep"] / medians["openssl_dgst_sha256"], 3),
        "ratio_prep_vs_sha256sum": round(medians["prep"] / medians["sha256sum"], 3),
        "ratio_prep_only_app_vs_openssl": round(medians["prep_only_app"] / medians["openssl_dgst_sha256"], 3),
        "ratio_library_in_process_vs_openssl": round(
            medians["library_in_process"] / medians["openssl_dgst_sha256"], 3
        ),
        "throughput_prep_gib_s": round(1 / medians["prep"], 3),
        "target": "prep <= 1.10 x openssl dgst -sha256",
    }


def bench_qcow2(workdir: Path, prep: str) -> dict[str, Any]:
    """Content digest of a 1 GiB qcow2 vs qemu-img convert + openssl."""
    raw = workdir / "bench-src.raw"
    image = workdir / "bench-1GiB.qcow2"
    converted = workdir / "bench-converted.raw"
    _write_random(raw, GIB, hole_every=5)
    subprocess.run(["qemu-img", "convert", "-O", "qcow2", str(raw), str(image)], check=True)
    raw.unlink()
    _warm(image)
    content_code = (
        "import sys; from uds_vm_operator.images import content_sha256; print(content_sha256(sys.argv[1]))"
    )

    def pipeline() -> tuple[float, str]:
        started = time.perf_counter()
        subprocess.run(["qemu-img", "convert", "-O", "raw", str(image), str(converted)], check=True)
        out = subprocess.run(
            ["openssl", "dgst", "-sha256", str(converted)], check=True, capture_output=True, text=True
        )
        converted.unlink()
        return time.perf_counter() - started, out.stdout

    samples, outputs = _rounds(
        {
            "content_digest": lambda: _timed([sys.executable, "-c", content_code, str(image)]),
            "prep_full": lambda: _timed([prep, "prep", "--json", str(image)]),
            "qemu_img_convert_plus_openssl": pipeline,
        }
    )
    ours = outputs["content_digest"].strip()
    assert ours in outputs["qemu_img_convert_plus_openssl"], "content digest disagrees with qemu-img"
    assert json.loads(outputs["prep_full"])["content_sha256"] == f"sha256:{ours}"
    medians = _medians(samples)
    return {
        "virtual_bytes": GIB,
        "qcow2_file_bytes": image.stat().st_size,
        "samples_s": samples,
        "median_s": medians,
        "ratio_content_digest_vs_pipeline": round(
            medians["content_digest"] / medians["qemu_img_convert_plus_openssl"], 3
        ),
        "ratio_prep_full_vs_pipeline": round(
            medians["prep_full"] / medians["qemu_img_convert_plus_openssl"], 3
        ),
        "pipeline": "qemu-img convert -O raw SRC /tmp/x; openssl dgst -sha256 /tmp/x (no pipe: qemu seeks)",
        "target": "content digest <= 1.0 x pipeline",
    }


def run() -> dict[str, Any]:
    """Both measurements; temporary files are always removed."""
    for tool, package in (("openssl", "openssl"), ("sha256sum", "coreutils"), ("qemu-img", "qemu-utils")):
        _require(tool, package)
    prep = _uds_vmctl()
    load_before = os.getloadavg()
    workdir = Path(tempfile.mkdtemp(prefix="uds-bench-prep-", dir="/tmp"))
    try:
        raw = bench_raw(workdir, prep)
        for leftover in workdir.iterdir():
            leftover.unlink()
        qcow2 = bench_qcow2(workdir, prep)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return {
        "raw_1GiB": raw,
        "qcow2_1GiB": qcow2,
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "summary": {
            "prep_vs_openssl_raw": raw["ratio_prep_vs_openssl"],
            "prep_only_app_vs_openssl_raw": raw["ratio_prep_only_app_vs_openssl"],
            "library_in_process_vs_openssl_raw": raw["ratio_library_in_process_vs_openssl"],
            "cli_startup_s": raw["median_s"]["cli_startup_version"],
            "prep_vs_sha256sum_raw": raw["ratio_prep_vs_sha256sum"],
            "content_digest_vs_qemu_pipeline_qcow2": qcow2["ratio_content_digest_vs_pipeline"],
            "prep_full_vs_qemu_pipeline_qcow2": qcow2["ratio_prep_full_vs_pipeline"],
        },
    }
