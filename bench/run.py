"""Run named benchmarks and write ``bench/results/<name>.json``.

Usage: ``python -m bench.run [name ...]`` (no names: every ``bench/<name>.py`` with a ``run()``).
"""

from __future__ import annotations

import ast
import importlib
import json
import pkgutil
import platform
import sys
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
NOT_BENCHES = {"run"}


def available() -> list[str]:
    """Names of the benchmark modules in this package: those with a ``run()`` (helpers have none).

    Found by parsing each module for a top-level ``def run``, so listing imports nothing (a benchmark's
    imports may start clusters' worth of machinery).
    """
    package_dir = Path(__file__).resolve().parent
    return sorted(
        m.name
        for m in pkgutil.iter_modules([str(package_dir)])
        if not m.name.startswith("_")
        and m.name not in NOT_BENCHES
        and _defines_run(package_dir / f"{m.name}.py")
    )


def _defines_run(module: Path) -> bool:
    tree = ast.parse(module.read_text(encoding="utf-8"))
    return any(isinstance(node, ast.FunctionDef) and node.name == "run" for node in tree.body)


def run_one(name: str) -> dict[str, Any]:
    """Import ``bench.<name>``, run it, stamp the result with the machine, and write the JSON file."""
    module = importlib.import_module(f"bench.{name}")
    started = time.time()
    result: dict[str, Any] = module.run()
    result.setdefault("benchmark", name)
    result["machine"] = {
        "python": platform.python_version(),
        "cpu": platform.processor() or platform.machine(),
    }
    result["started_unix"] = round(started)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    return result


def main(argv: list[str]) -> int:
    """Run the benchmarks named in ``argv`` (all when empty); exit 2 on an unknown name."""
    names = argv or available()
    unknown = [n for n in names if n not in available()]
    if unknown:
        print(
            f"error: unknown benchmark(s) {', '.join(unknown)}; available: {', '.join(available())}",
            file=sys.stderr,
        )
        return 2
    for name in names:
        print(f"bench {name} ...", file=sys.stderr, flush=True)
        result = run_one(name)
        print(json.dumps(result.get("summary", result), indent=2), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
