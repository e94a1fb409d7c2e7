"""``uds-vm-operator backup-disks`` to a real S3 store vs ``sha256sum`` + ``curl`` doing the same job.

Issue 33. What is real: the store is the Versity S3 gateway (``tools/s3/build.sh``, cached; the tests'
store) on a loopback port with its ``posix`` backend over a directory under /tmp, checking every request's
SigV4 signature, region and payload sha256; the disk is the project's 2 GiB Debian guest image
(``.envtest/guest/debian-12.raw``, built by ``tools/guest/image.sh`` if absent; sparse, as a CDI disk.img
is). ``BENCH_BACKUP_BYTES=N`` backs up a generated N-byte file instead: 1 MiB blocks alternately random and
holes (half data, half zeros, like a disk). The source file is warm in the page cache (it is hashed once
before the rounds); object writes go to the page cache too, and ``sync`` runs (untimed) after each delete
so one run's writeback does not land in the next.

Measured, three rounds, interleaved, medians compared; the object is deleted after every run:

1. ``python -m uds_vm_operator.operator_main backup-disks --endpoint ... --bucket ... --disk root=PATH=KEY
   --termination-log ''`` as the copy pod runs it (credentials in ``UDS_BACKUP_ACCESS_KEY_ID`` /
   ``UDS_BACKUP_SECRET_ACCESS_KEY``, default 32 MiB parts): wall time from exec to exit (interpreter start
   included), the seconds it reports itself, CPU seconds and peak RSS (``wait4``). The sha256 it reports must
   equal hashlib's of the file; in the first round the stored object's bytes are hashed too.
2. The engine's own tools: ``sha256sum FILE`` then one signed ``curl --aws-sigv4 -T FILE`` PUT carrying that
   digest in ``x-amz-content-sha256`` (curl 7.88 signs a file upload only with the header given); both
   together, and the PUT alone. An ``UNSIGNED-PAYLOAD`` PUT (the store checks no digest) for reference, and
   ``openssl dgst -sha256`` + the signed PUT as a second anchor: coreutils' sha256sum does not use the CPU's
   SHA extensions, OpenSSL (and so hashlib, which the copier hashes with) does.
3. Restore side: ``curl --aws-sigv4 -o /dev/null`` GET of the object ``backup-disks`` wrote, and
   ``sha256sum``'s rate on the file (the verifier's hashing is what bounds a restore check).

Each sample also records the gateway's CPU seconds during it (``/proc/<pid>/stat``). Note when comparing:
``backup-disks`` uploads multipart, and the gateway's ``posix`` backend assembles the parts into the object on
CompleteMultipartUpload (``copy_file_range``, a second in-kernel copy of the bytes on ext4), which a single
curl PUT does not cost it. Figures: ``summary`` (our wall / theirs, and MiB/s). The gateway is stopped by its
PID and the temporary directory removed, whatever happens.
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
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.image_env import image_environment
from tests.s3_gateway import ACCESS_KEY, SECRET_KEY, Gateway, running_gateway
from uds_vm_operator.backup.s3 import EMPTY_SHA256

ROOT = Path(__file__).resolve().parents[1]

MIB = 1 << 20
ROUNDS = 3
IMAGE_SCRIPT = ROOT / "tools" / "guest" / "image.sh"
GUEST_RAW = ROOT / ".envtest" / "guest" / "debian-12.raw"
BUCKET = "bench-backups"
PART_MIB = 32  # backup-disks' default, named for the record
RUN_TIMEOUT_S = 1800
CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Sample:
    """One timed process: wall and CPU seconds, peak RSS, and the gateway's CPU seconds meanwhile."""

    wall_s: float
    cpu_s: float
    max_rss_kib: int
    gateway_cpu_s: float
    stdout: str

    def record(self) -> dict[str, float]:
        return {
            "wall_s": round(self.wall_s, 4),
            "cpu_s": round(self.cpu_s, 3),
            "max_rss_mib": round(self.max_rss_kib / 1024, 1),
            "gateway_cpu_s": round(self.gateway_cpu_s, 3),
        }


def _cpu_seconds(pid: int) -> float:
    """utime + stime of a live process, from /proc (fields 14 and 15, counted after the comm's ``)``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def _measure(command: list[str], gateway: Gateway, env: dict[str, str] | None = None) -> Sample:
    """Run ``command`` to its end; ``wait4`` gives its own CPU time and peak RSS. A failure raises."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        gateway_before = _cpu_seconds(gateway.pid)
        started = time.perf_counter()
        process = subprocess.Popen(command, stdout=out, stderr=err, env=env)
        watchdog = threading.Timer(RUN_TIMEOUT_S, process.kill)
        watchdog.start()
        try:
            _, status, usage = os.wait4(process.pid, 0)
        finally:
            watchdog.cancel()
        wall = time.perf_counter() - started
        gateway_cpu = _cpu_seconds(gateway.pid) - gateway_before
        process.returncode = os.waitstatus_to_exitcode(status)  # reaped here, so Popen must not wait
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode(errors="replace")
        if process.returncode != 0:
            stderr = err.read().decode(errors="replace")
            name = " ".join(command[:3])
            raise RuntimeError(f"{name} ... exited {process.returncode}:\n{stdout[-2000:]}\n{stderr[-3000:]}")
    return Sample(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss, gateway_cpu, stdout)


def _generate_disk(path: Path, size: int) -> None:
    """``size`` bytes in 1 MiB blocks: even blocks random, odd blocks holes (read back as zeros)."""
    with path.open("wb") as handle:
        for index, offset in enumerate(range(0, size, MIB)):
            count = min(MIB, size - offset)
            if index % 2 == 0:
                handle.write(os.urandom(count))
            else:
                handle.seek(count, os.SEEK_CUR)
        handle.truncate(size)


def _source(workdir: Path) -> tuple[Path, str]:
    """The file to back up and what it is: BENCH_BACKUP_BYTES generated, else the guest image."""
    override = os.environ.get("BENCH_BACKUP_BYTES")
    if override:
        size = int(override)
        if size <= 0:
            raise SystemExit(f"BENCH_BACKUP_BYTES={override} must be a positive number of bytes")
        path = workdir / "disk.img"
        _generate_disk(path, size)
        return path, "generated: 1 MiB blocks, alternately random and holes"
    if not GUEST_RAW.exists():
        done = subprocess.run(
            [str(IMAGE_SCRIPT)], capture_output=True, text=True, check=True, timeout=3600
        )  # cached: builds only when the guest image is missing
        return (Path(done.stdout.strip().splitlines()[-1]) / "debian-12.raw").resolve(), "guest image"
    return GUEST_RAW.resolve(), "guest image"


def _filesystem(path: Path) -> dict[str, str]:
    """``stat -f`` type and, when findmnt exists, the mount's real type, device and mount point."""
    info = {"stat_f_type": _output(["stat", "-f", "-c", "%T", str(path)])}
    if shutil.which("findmnt"):
        fstype, source, target = _output(
            ["findmnt", "-n", "-o", "FSTYPE,SOURCE,TARGET", "--target", str(path)]
        ).split(maxsplit=2)
        info |= {"fstype": fstype, "device": source, "mount_point": target}
    return info


def _output(command: list[str]) -> str:
    return subprocess.run(command, capture_output=True, text=True, check=True, timeout=60).stdout.strip()


def _git() -> dict[str, Any]:
    try:
        commit = _output(["git", "-C", str(ROOT), "rev-parse", "HEAD"])
        dirty = bool(_output(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"]))
        untracked = _output(
            [
                "git",
                "-C",
                str(ROOT),
                "ls-files",
                "--others",
                "--exclude-standard",
                "src/uds_vm_operator/backup",
            ]
        )
    except (OSError, subprocess.CalledProcessError):
        return {"commit": "unknown"}
    return {"commit": commit, "tracked_changes": dirty, "backup_code_untracked": bool(untracked)}


def _curl(gateway: Gateway, payload_sha256: str, *args: str) -> list[str]:
    return [
        "curl",
        "-sS",
        "--fail-with-body",
        "--aws-sigv4",
        f"aws:amz:{gateway.region}:s3",
        "--user",
        f"{ACCESS_KEY}:{SECRET_KEY}",
        "-H",
        f"x-amz-content-sha256: {payload_sha256}",
        "-o",
        "/dev/null",
        *args,
    ]


def _url(gateway: Gateway, key: str) -> str:
    return f"{gateway.endpoint}/{BUCKET}/{key}"


def _delete(gateway: Gateway, key: str) -> None:
    with gateway.client() as client:
        client.delete_object(BUCKET, key)
    assert not gateway.object_file(BUCKET, key).exists(), f"{key} still stored after DELETE"
    os.sync()  # untimed: the next run starts without this one's dirty pages


def _file_sha256(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _round(gateway: Gateway, source: Path, size: int, expected: str, first: bool) -> dict[str, Sample]:
    """One of each measurement, in a fixed order, each object deleted after its run."""
    samples: dict[str, Sample] = {}
    env = image_environment(os.environ) | {
        "UDS_BACKUP_ACCESS_KEY_ID": ACCESS_KEY,
        "UDS_BACKUP_SECRET_ACCESS_KEY": SECRET_KEY,
    }
    key = "backup-disks/root.img"
    command = [sys.executable, "-m", "uds_vm_operator.operator_main", "backup-disks"]
    command += ["--endpoint", gateway.endpoint, "--bucket", BUCKET, "--disk", f"root={source}={key}"]
    command += ["--termination-log", ""]
    samples["backup_disks"] = backup = _measure(command, gateway, env)
    report = json.loads(backup.stdout)
    assert report["result"] == "ok", report
    (disk,) = report["disks"]
    assert disk["sha256"] == f"sha256:{expected}", (
        f"backup-disks reported {disk['sha256']}, file is {expected}"
    )
    assert disk["bytes"] == size == gateway.object_file(BUCKET, key).stat().st_size
    if first:
        assert _file_sha256(gateway.object_file(BUCKET, key)) == expected, (
            "the stored object differs from the file"
        )
    samples["curl_get"] = get = _measure(
        _curl(gateway, EMPTY_SHA256, "-w", "%{size_download}", _url(gateway, key)), gateway
    )
    assert int(get.stdout) == size, f"GET returned {get.stdout} bytes, not {size}"
    _delete(gateway, key)

    samples["sha256sum"] = summed = _measure(["sha256sum", str(source)], gateway)
    digest = summed.stdout.split()[0]
    assert digest == expected, f"sha256sum says {digest}, hashlib {expected}"
    samples["openssl_dgst_sha256"] = dgst = _measure(["openssl", "dgst", "-sha256", str(source)], gateway)
    assert dgst.stdout.split()[-1] == expected, f"openssl says {dgst.stdout}, hashlib {expected}"
    for name, payload in (("curl_put_signed", digest), ("curl_put_unsigned", "UNSIGNED-PAYLOAD")):
        key = f"{name}/root.img"
        put = _curl(gateway, payload, "-w", "%{size_upload}", "-T", str(source), _url(gateway, key))
        samples[name] = sent = _measure(put, gateway)
        assert int(sent.stdout) == size == gateway.object_file(BUCKET, key).stat().st_size
        _delete(gateway, key)
    return samples


def run() -> dict[str, Any]:
    """Start the gateway, run the rounds, and always stop it and remove the temporary directory."""
    for tool in ("curl", "sha256sum", "openssl", "stat"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} not found (make system-deps)")
    load_before = os.getloadavg()
    workdir = Path(tempfile.mkdtemp(prefix="uds-bench-backup-", dir="/tmp"))
    try:
        source, kind = _source(workdir)
        size = source.stat().st_size
        allocated = source.stat().st_blocks * 512
        hash_started = time.perf_counter()
        expected = _file_sha256(source)  # also warms the page cache
        hashlib_s = time.perf_counter() - hash_started
        with running_gateway(workdir) as gateway:
            gateway.new_bucket(BUCKET)
            rounds = [_round(gateway, source, size, expected, first=index == 0) for index in range(ROUNDS)]
            filesystems = {"gateway_root": _filesystem(gateway.root), "source": _filesystem(source)}
            store = {"server": f"versitygw {gateway.version} posix", "region": gateway.region}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    names = list(rounds[0])
    samples = {name: [r[name].record() for r in rounds] for name in names}
    wall = {name: [r[name].wall_s for r in rounds] for name in names}
    for hasher in ("sha256sum", "openssl_dgst_sha256"):
        wall[f"{hasher}_plus_curl_put"] = [r[hasher].wall_s + r["curl_put_signed"].wall_s for r in rounds]
    median_s = {name: statistics.median(values) for name, values in wall.items()}
    mib = size / MIB
    mib_s = {name: round(mib / seconds, 1) for name, seconds in median_s.items()}
    reported = statistics.median(json.loads(r["backup_disks"].stdout)["seconds"] for r in rounds)
    backup_rss = [r["backup_disks"].max_rss_kib / 1024 for r in rounds]
    return {
        "bytes": size,
        "allocated_bytes": allocated,
        "source": {"kind": kind, "path": str(source), "sha256": expected},
        "filesystems": filesystems,
        "store": store,
        "curl": _output(["curl", "--version"]).splitlines()[0],
        "backup_part_mib": PART_MIB,
        "rounds": ROUNDS,
        "samples": samples,
        "median_s": {name: round(seconds, 4) for name, seconds in median_s.items()},
        "mib_s": mib_s,
        "backup_disks_self_reported_s_median": reported,
        "backup_disks_peak_rss_mib": {
            "median": round(statistics.median(backup_rss), 1),
            "max": round(max(backup_rss), 1),
        },
        "hashlib_sha256_warmup_mib_s": round(mib / hashlib_s, 1),
        "git": _git(),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "summary": {
            "backup_vs_sha256sum_plus_curl_put": round(
                median_s["backup_disks"] / median_s["sha256sum_plus_curl_put"], 3
            ),
            "backup_vs_curl_put_alone": round(median_s["backup_disks"] / median_s["curl_put_signed"], 3),
            "backup_vs_openssl_dgst_plus_curl_put": round(
                median_s["backup_disks"] / median_s["openssl_dgst_sha256_plus_curl_put"], 3
            ),
            "backup_vs_curl_put_unsigned": round(median_s["backup_disks"] / median_s["curl_put_unsigned"], 3),
            "backup_mib_s": mib_s["backup_disks"],
            "backup_self_reported_mib_s": round(mib / reported, 1),
            "sha256sum_plus_curl_put_mib_s": mib_s["sha256sum_plus_curl_put"],
            "curl_put_signed_mib_s": mib_s["curl_put_signed"],
            "curl_put_unsigned_mib_s": mib_s["curl_put_unsigned"],
            "curl_get_mib_s": mib_s["curl_get"],
            "sha256sum_mib_s": mib_s["sha256sum"],
            "openssl_dgst_sha256_mib_s": mib_s["openssl_dgst_sha256"],
            "backup_peak_rss_mib": round(max(backup_rss), 1),
            "bytes": size,
        },
    }
