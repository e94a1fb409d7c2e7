"""`make bench` runs every benchmark `bench.run` lists: a helper module listed there would fail the run.

`available()` decides by parsing the source; this test judges by importing each module, so the two cannot
share a mistake.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from bench import run as bench_run

BENCH = Path(bench_run.__file__).resolve().parent


def _has_run(name: str) -> bool:
    return callable(getattr(importlib.import_module(f"bench.{name}"), "run", None))


def test_every_listed_benchmark_has_a_run_function_and_no_helper_is_listed() -> None:
    listed = bench_run.available()
    assert listed, "some benchmarks are listed"
    assert all(_has_run(name) for name in listed)
    modules = [p.stem for p in BENCH.glob("*.py") if p.stem not in {"__init__", "run"}]
    helpers = [name for name in modules if not _has_run(name)]
    assert "page_cache" in helpers  # the premise: helper modules exist beside the benchmarks
    assert not set(helpers) & set(listed)


def test_a_helper_module_named_on_the_command_line_is_refused() -> None:
    assert bench_run.main(["page_cache"]) == 2
