"""`make demo` in `make test` (issue 31): the demo's own code, run on the node tier's node, every stage real.

The demo is run as `make demo` runs it (tools/demo.py, a new process), with ``--reuse-node`` because one node
runs per machine and the tier's node is up: the demo brings KubeVirt, CDI and the chart onto it, does the
field engineer's whole path, and removes what it added. It runs after every other node test and before the
node life-cycle test (which stops the node), hence the file name. The test fails if any stage fails, if any
stage says it was played, or if a stage is missing from the timing table.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.node.node_cluster import NodeHandle
from tools.envtest import processes
from tools.node.node import log_tail

# Alone on the node (tests/node/lanes.py): the demo installs CDI, KubeVirt and the chart, and removes
# what it added.
pytestmark = pytest.mark.alone_on_the_node

ROOT = Path(__file__).resolve().parents[2]
# Bounds the whole demo on the tier's node: a warm demo takes about 4 min on a quiet machine, but it installs
# CDI, KubeVirt and the chart again and boots under TCG after 50 min of other tests (the last CI: > 600 s).
DEMO_TIMEOUT_S = 1500
KEPT_OUTPUT = ROOT / ".envtest" / "demo-output.txt"
"""The last run's output with its time per stage, kept whether it passed or not."""
STAGES = (
    "control plane + real node",
    "images: operator, KubeVirt, Debian guest",
    "KubeVirt v",
    "CDI: operator, controller, upload proxy",
    "helm install (restricted namespace)",
    "uds-vmctl prep + apply",
    "uds-vmctl upload through CDI's upload proxy",
    "SI-7: the verifier pod on the landed bytes",
    "KubeVirt boots the guest (software emulation)",
    "IA-2/AC-17: the guest's hardening",
    "SC-7: the VM's policy proven by packets",
    "evidence: verify, inventory, compliance",
    "SI-7: a tampered image",
    "teardown (what the demo added)",
)


@pytest.mark.timeout(DEMO_TIMEOUT_S + 120)
def test_the_demo_runs_every_stage_on_real_components(node: NodeHandle) -> None:
    # The demo's output goes to a file as it runs, so a slow or stuck stage is seen (its rule, its last line)
    # even when the run is stopped from outside; the demo's own waits are bounded and fail first.
    log = node.state_dir / "logs" / "demo.log"
    log.unlink(missing_ok=True)  # spawn appends: the log holds this run only
    argv = [
        sys.executable,
        "-m",
        "tools.demo",
        "--state-dir",
        str(node.state_dir),
        "--reuse-node",
    ]
    demo, _ = processes.spawn(
        "demo", argv, log, {**os.environ, "COLUMNS": "200"}, tie_to_parent=True, cwd=ROOT
    )
    try:
        returncode = demo.wait(timeout=DEMO_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(demo.pid, signal.SIGKILL)  # the demo's own session: it and the helm, ssh, vmctl it started
        demo.wait(timeout=60)
        pytest.fail(f"the demo ran past {DEMO_TIMEOUT_S} s; its output ({log}):\n{log_tail(log, 120)}")
    output = log.read_text(encoding="utf-8", errors="replace")
    print(output)
    KEPT_OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    KEPT_OUTPUT.write_text(output, encoding="utf-8")  # the node's state dir goes at the session's end
    assert returncode == 0, output[-8000:]
    assert not re.search(r"\bplayed\b", output, re.IGNORECASE), "a stage says it was played"
    assert "demo failed" not in output
    table = output[output.rindex("time per stage") :]
    missing = [name for name in STAGES if name not in table]
    assert missing == [], f"stages missing from the timing table: {missing}\n{table}"
    assert "refused (Permission denied)" in output and "tampered copy refused" in output
    assert "status.checksumVerified = true by in-cluster-verifier" in output
