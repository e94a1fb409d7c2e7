"""The SI-7 verifier's read rate on a real volume against ``openssl dgst -sha256`` on the same file, same run.

A 1 GiB disk image (random bytes) is written onto a loop-backed ext4 volume and onto a loop-backed raw Block
device, both made with tools/node/volumes.py exactly as the real-node tier offers them to pods. On each, the
command the verifier pod runs (``uds-vm-operator verify-disk --path ... --virtual-size ... --expected ...``)
is timed against ``openssl dgst -sha256`` of the same path; five interleaved rounds, medians compared. The
page cache is dropped for the file's pages before each run (posix_fadvise DONTNEED): both read the device.
Loop devices and mounts are removed at the end.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.page_cache import timed_from_disk
from tools.node import host_baseline, volumes
from tools.node import node_configs as cfg

SIZE = 1 << 30
ROUNDS = 5


def _measure(path: str, digest: str, tmp: Path) -> dict[str, Any]:
    verifier = str(Path(sys.executable).with_name("uds-vm-operator"))
    ours = [
        verifier,
        "verify-disk",
        "--path",
        path,
        "--virtual-size",
        str(SIZE),
        "--expected",
        digest,
        "--termination-log",
        str(tmp / "termination-log"),
    ]
    anchor = ["openssl", "dgst", "-sha256", path]
    runs: dict[str, list[float]] = {"verifier": [], "openssl": []}
    for _ in range(ROUNDS):
        runs["verifier"].append(timed_from_disk(ours, path))
        runs["openssl"].append(timed_from_disk(anchor, path))
    medians = {name: statistics.median(values) for name, values in runs.items()}
    return {
        "runs_s": runs,
        "median_s": medians,
        "verifier_mib_s": round(SIZE / (1 << 20) / medians["verifier"], 1),
        "openssl_mib_s": round(SIZE / (1 << 20) / medians["openssl"], 1),
        "ratio_verifier_to_openssl_time": round(medians["verifier"] / medians["openssl"], 3),
    }


def run() -> dict[str, Any]:
    """Measure on ext4 and on a raw block device; returns figures for bench/results/verifier_volume.json."""
    state = Path(tempfile.mkdtemp(prefix="udsv-bench-", dir="/tmp"))
    paths = cfg.NodePaths(state_dir=state, run_dir=state / "run")
    data = os.urandom(SIZE)
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    results: dict[str, Any] = {}
    try:
        fs = volumes.make_volume(paths, volumes.filesystem_size_for(SIZE, SIZE), "Filesystem", "ext4")
        assert fs.mount_point is not None
        disk = fs.mount_point / "disk.img"
        disk.write_bytes(data)
        os.sync()
        results["ext4_file"] = _measure(str(disk), digest, state)
        block = volumes.make_volume(paths, SIZE, "Block", content=data)
        os.sync()
        results["block_device"] = _measure(block.device, digest, state)
    finally:
        host_baseline.unmount_under(state)
        if paths.loops.is_file():
            for entry in json.loads(paths.loops.read_text(encoding="utf-8")):
                subprocess.run(["losetup", "-d", entry["device"]], check=False)
        shutil.rmtree(state, ignore_errors=True)
    return {
        "size_bytes": SIZE,
        "rounds": ROUNDS,
        "results": results,
        "summary": {
            name: {k: v for k, v in figures.items() if k != "runs_s"} for name, figures in results.items()
        },
    }
