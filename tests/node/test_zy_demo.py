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
import subprocess
import sys
from pathlib import Path

from node_cluster import NodeHandle

ROOT = Path(__file__).resolve().parents[2]
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


def test_the_demo_runs_every_stage_on_real_components(node: NodeHandle) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "demo.py"), "--state-dir", str(node.state_dir), "--reuse-node"],
        capture_output=True,
        text=True,
        timeout=2400,
        env={**os.environ, "COLUMNS": "200"},
        check=False,
    )
    output = done.stdout + done.stderr
    print(output)
    assert done.returncode == 0, output[-8000:]
    assert not re.search(r"\bplayed\b", output, re.IGNORECASE), "a stage says it was played"
    assert "demo failed" not in output
    table = output[output.rindex("time per stage") :]
    missing = [name for name in STAGES if name not in table]
    assert missing == [], f"stages missing from the timing table: {missing}\n{table}"
    assert "refused (Permission denied)" in output and "tampered copy refused" in output
    assert "status.checksumVerified = true by in-cluster-verifier" in output
