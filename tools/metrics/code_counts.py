"""Structural counts of ``src/`` that issue 18 reads before and after the runtime refactor.

Why: the refactor's acceptance is "fewer of these", so the counts must come from one script that reads
the tree the same way both times, not from hand-run greps.

Usage: ``python tools/metrics/code_counts.py [ROOT]`` (ROOT defaults to this checkout); prints JSON.

- ``long_functions``: functions (sync or async) over 60 lines, end line minus start line plus one;
- ``hand_written_requests``: ``<api>.request(...)`` awaited on the operator's API client outside the
  client module itself (the controller and runtime packages; the CLI has its own client);
- ``condition_tuple_aliases``: module-level names bound to ``tuple[str, str, str]`` or
  ``tuple[str, tuple[str, str, str]]`` in the controller layer (the untyped condition shapes).
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

LONG_FUNCTION_LINES = 60
CLIENT_MODULES = {"kube.py", "client.py", "transport.py"}
OPERATOR_PACKAGES = ("controller", "runtime")
CONDITION_SHAPES = {"tuple[str, str, str]", "tuple[str, tuple[str, str, str]]", "tuple[str, Cond]"}


def long_functions(src: Path) -> list[str]:
    """Every function over the line limit, as ``path:line name (N lines)``."""
    found: list[str] = []
    for path in sorted(src.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > LONG_FUNCTION_LINES:
                    found.append(f"{path.relative_to(src)}:{node.lineno} {node.name} ({lines} lines)")
    return found


def _operator_files(src: Path) -> list[Path]:
    files: list[Path] = []
    for package in OPERATOR_PACKAGES:
        files.extend(sorted((src / "uds_vm_operator" / package).glob("*.py")))
    return files


def hand_written_requests(src: Path) -> list[str]:
    """Each ``await X.request(...)`` in the operator's packages outside the client modules."""
    found: list[str] = []
    for path in _operator_files(src):
        if path.name in CLIENT_MODULES:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Await)
                and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Attribute)
                and node.value.func.attr == "request"
            ):
                found.append(f"{path.relative_to(src)}:{node.lineno}")
    return found


def condition_tuple_aliases(src: Path) -> list[str]:
    """Module-level aliases of the ``(status, reason, message)`` tuple shapes."""
    found: list[str] = []
    for path in _operator_files(src):
        for node in ast.parse(path.read_text(), str(path)).body:
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and ast.unparse(node.value) in CONDITION_SHAPES
            ):
                found.append(f"{path.relative_to(src)}:{node.lineno} {node.targets[0].id}")
    return found


def main(argv: list[str]) -> int:
    """Print the counts (and the places behind them) for the checkout at ``argv[0]`` or this one."""
    root = Path(argv[0]) if argv else Path(__file__).resolve().parents[2]
    src = root / "src"
    report = {
        "long_functions": long_functions(src),
        "hand_written_requests": hand_written_requests(src),
        "condition_tuple_aliases": condition_tuple_aliases(src),
    }
    counts = {name: len(places) for name, places in report.items()}
    print(json.dumps({"counts": counts, "places": report}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
