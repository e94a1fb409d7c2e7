"""Fuzz campaign on the image parsers: ≥ 1,000,000 mutated inputs, only ``ImageError`` may come out.

Reuses the unit tier's seed corpus (``tests/unit/test_images_fuzz.py``: one valid image per format —
qcow2 v2/v3 with zlib/zstd/extended L2/backing/data file, VPC dynamic/differencing/fixed, VHDX with and
without parent locator, VMDK sparse/descriptor, ISO/UDF — built by ``tests/unit/image_builders.py``) and
its mutation operator (byte flips, extreme integers planted in header and table regions, truncation).
Chunks of inputs are spread over worker processes (one per core); each chunk has its own deterministic
RNG stream (``seed name:chunk``), so any crash is replayable from the reported name, chunk and case.

Figures: inputs, inputs/s, how many were accepted vs refused, crashes (anything other than
``ImageError``; must be 0), the slowest single input (a hang shows up here), and the workers' peak RSS
(``VmHWM``; bounded memory). The anchor measured in the same run is the bare mutation rate — the same
RNG and mutations with no parsing — so ``parse_share`` says how much of the time the parsers take.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import time
from pathlib import Path
from typing import Any

INPUTS = 1_000_000
CHUNK = 5_000
MAX_CRASH_REPORTS = 20


def _peak_rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


_SEED_CACHE: dict[str, tuple[bytes, list[tuple[int, int]]]] = {}


def _seed(name: str) -> tuple[bytes, list[tuple[int, int]]]:
    if name not in _SEED_CACHE:
        from tests.unit.test_images_fuzz import SEEDS  # noqa: PLC0415

        factory, regions = SEEDS[name]
        _SEED_CACHE[name] = (factory(), regions)
    return _SEED_CACHE[name]


def _fuzz_chunk(task: tuple[str, int, int]) -> dict[str, Any]:
    """Run ``count`` mutations of one seed; report counts, crashes, the slowest input and peak RSS."""
    from tests.unit.test_images_fuzz import check_one, mutate  # noqa: PLC0415

    name, chunk, count = task
    data, regions = _seed(name)
    rng = random.Random(f"uds-vm-operator:{name}:{chunk}")
    accepted = 0
    crashes: list[str] = []
    slowest = 0.0
    for case in range(count):
        mutated = mutate(data, regions, rng)
        started = time.perf_counter()
        try:
            accepted += check_one(mutated)
        except Exception as exc:  # anything but ImageError (check_one swallows those) is a crash
            crashes.append(f"{name} chunk {chunk} case {case}: {type(exc).__name__}: {exc}"[:300])
        slowest = max(slowest, time.perf_counter() - started)
    return {
        "count": count,
        "accepted": accepted,
        "crashes": crashes,
        "slowest_s": slowest,
        "rss": _peak_rss_mib(),
    }


def _mutate_only(task: tuple[str, int, int]) -> int:
    from tests.unit.test_images_fuzz import mutate  # noqa: PLC0415

    name, chunk, count = task
    data, regions = _seed(name)
    rng = random.Random(f"uds-vm-operator:{name}:{chunk}")
    for _ in range(count):
        mutate(data, regions, rng)
    return count


def _tasks(total: int) -> list[tuple[str, int, int]]:
    from tests.unit.test_images_fuzz import SEEDS  # noqa: PLC0415

    names = sorted(SEEDS)
    per_seed = -(-total // len(names))
    tasks = []
    for name in names:
        for chunk, start in enumerate(range(0, per_seed, CHUNK)):
            tasks.append((name, chunk, min(CHUNK, per_seed - start)))
    return tasks


def run() -> dict[str, Any]:
    """Run the campaign on every core; the dict becomes bench/results/fuzz_images.json."""
    total = int(os.environ.get("BENCH_FUZZ_INPUTS", INPUTS))
    workers = os.cpu_count() or 1
    tasks = _tasks(total)
    context = multiprocessing.get_context("fork")
    with context.Pool(workers) as pool:
        anchor_started = time.perf_counter()
        mutated = sum(pool.map(_mutate_only, tasks[: max(1, len(tasks) // 20)]))
        anchor_s = time.perf_counter() - anchor_started
        started = time.perf_counter()
        results = pool.map(_fuzz_chunk, tasks, chunksize=1)
        seconds = time.perf_counter() - started
    inputs = sum(r["count"] for r in results)
    crashes = [c for r in results for c in r["crashes"]]
    mutate_rate = mutated / anchor_s
    rate = inputs / seconds
    figures = {
        "inputs": inputs,
        "seeds": len({t[0] for t in tasks}),
        "workers": workers,
        "seconds": round(seconds, 1),
        "inputs_per_s": round(rate),
        "accepted": sum(r["accepted"] for r in results),
        "refused_with_image_error": inputs - sum(r["accepted"] for r in results) - len(crashes),
        "crashes": len(crashes),
        "crash_examples": crashes[:MAX_CRASH_REPORTS],
        "slowest_input_s": round(max(r["slowest_s"] for r in results), 4),
        "worker_peak_rss_mib": max(r["rss"] for r in results),
        "anchor_mutations_per_s": round(mutate_rate),
        "parse_share": round(1 - rate / mutate_rate, 3),
    }
    figures["summary"] = {
        key: figures[key]
        for key in ("inputs", "inputs_per_s", "crashes", "slowest_input_s", "worker_peak_rss_mib")
    }
    return figures


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
