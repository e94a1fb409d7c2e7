"""Every ``uds-vmctl`` command against a table of hostile inputs: one clear line, exit 1 or 2, no traceback.

The sweep crosses each command with the inputs a field engineer can get wrong: kubeconfigs (empty, binary,
not a mapping, wrongly typed, incomplete, unusable server URL, undecodable certificate data, paths that
are directories, devices, FIFOs or symlink loops), image paths (empty, truncated, garbage behind a valid
magic, devices, loops) and flag values out of range. Each case asserts the exit code is 1 or 2, stderr says
``error: ...`` in one line (or typer's own usage message for a flag typer rejects), no traceback appears,
and nothing was written: no output file or directory, no temporary left behind.

Every case runs in-process (typer's runner, fast); a representative part (every kubeconfig and image case
once, rotating over the commands, and the flag cases) also runs the installed ``uds-vmctl`` as a real
process, where a traceback printed by Python itself would show. The cluster address is a loopback port
this module holds bound but never listens on, so "cannot reach the API server" is certain and local.
"""

from __future__ import annotations

import base64
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from tests.unit import image_builders as build
from uds_vm_operator.cli.main import app

TRACEBACK = "Traceback (most recent call last)"
PEM_GARBAGE = b"-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n"
CLI = Path(sys.executable).with_name("uds-vmctl")


# ------------------------------------------------------------------------------------------- the inputs


@pytest.fixture(scope="module")
def refused_port() -> Iterator[int]:
    """A loopback port bound (so nobody else can listen on it) but not listening: connects are refused."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    yield sock.getsockname()[1]
    sock.close()


def kubeconfig(port: int, **changes: Any) -> dict[str, Any]:
    """A kubeconfig that would work if the API server ran; ``changes`` replace parts of it."""
    config: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "field",
        "contexts": [
            {"name": "field", "context": {"cluster": "site", "user": "engineer", "namespace": "apps"}}
        ],
        "clusters": [
            {
                "name": "site",
                "cluster": {"server": f"https://127.0.0.1:{port}", "insecure-skip-tls-verify": True},
            }
        ],
        "users": [{"name": "engineer", "user": {"token": "t0ken"}}],
    }
    config.update(changes)
    return config


def with_cluster(port: int, **fields: Any) -> dict[str, Any]:
    cluster = {"server": f"https://127.0.0.1:{port}", **fields}
    return kubeconfig(
        port, clusters=[{"name": "site", "cluster": {k: v for k, v in cluster.items() if v is not None}}]
    )


def with_user(port: int, **fields: Any) -> dict[str, Any]:
    return kubeconfig(port, users=[{"name": "engineer", "user": fields}])


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def kubeconfig_table(port: int, inputs: Path) -> dict[str, bytes | dict[str, Any] | Callable[[Path], Path]]:
    """Name → file content (bytes, or a dict written as YAML), or a function making a special path."""
    (inputs / "ca-dir").mkdir(exist_ok=True)
    (inputs / "not-pem.crt").write_text("just text\n")
    context = {"cluster": "site", "user": "engineer"}
    return {
        "empty file": b"",
        "only whitespace": b"  \n\n",
        "YAML null": b"~\n",
        "binary": bytes(range(256)) * 4,
        "NUL bytes in text": b"apiVersion: v1\x00\x00\n",
        "invalid YAML": b"clusters: [\n  - name: site\n",
        "two YAML documents": b"a: 1\n---\nb: 2\n",
        "deeply nested": b"[" * 600 + b"]" * 600,  # deeper than the YAML parser's recursion allows
        "a list": b"- clusters\n- contexts\n",
        "a string": b"just a string\n",
        "a number": b"42\n",
        "clusters is a number": kubeconfig(port, clusters=5),
        "contexts is a string": kubeconfig(port, contexts="field"),
        "users is a string": kubeconfig(port, users="engineer"),
        "context entry not a mapping": kubeconfig(port, contexts=[7]),
        "context entry without name": kubeconfig(port, contexts=[{"context": context}]),
        "context body a string": kubeconfig(port, contexts=[{"name": "field", "context": "site"}]),
        "context.cluster a number": kubeconfig(port, contexts=[{"name": "field", "context": {"cluster": 3}}]),
        "server a number": with_cluster(port, server=6443),
        "insecure flag a string": with_cluster(port, **{"insecure-skip-tls-verify": "yes"}),
        "token a number": with_user(port, token=12345),
        "no current-context": kubeconfig(port, **{"current-context": ""}),
        "current-context a list": kubeconfig(port, **{"current-context": ["field"]}),
        "current-context unknown": kubeconfig(port, **{"current-context": "elsewhere"}),
        "context without cluster": kubeconfig(
            port, contexts=[{"name": "field", "context": {"user": "engineer"}}]
        ),
        "missing cluster": kubeconfig(port, clusters=[]),
        "no clusters key": {k: v for k, v in kubeconfig(port).items() if k != "clusters"},
        "missing user": kubeconfig(port, users=[]),
        "no server": with_cluster(port, server=None),
        "server not a URL": with_cluster(port, server="not a url"),
        "server ftp scheme": with_cluster(port, server="ftp://127.0.0.1:21"),
        "server port out of range": with_cluster(port, server="https://127.0.0.1:99999"),
        "server without host": with_cluster(port, server="https://:6443"),
        "CA data not base64": with_cluster(port, **{"certificate-authority-data": "!!!not-base64"}),
        "CA data not PEM": with_cluster(port, **{"certificate-authority-data": b64(b"\x30\x82garbage")}),
        "CA data PEM of garbage": with_cluster(port, **{"certificate-authority-data": b64(PEM_GARBAGE)}),
        "CA file missing": with_cluster(port, **{"certificate-authority": "absent-ca.crt"}),
        "CA file a directory": with_cluster(port, **{"certificate-authority": str(inputs / "ca-dir")}),
        "CA file not PEM": with_cluster(port, **{"certificate-authority": str(inputs / "not-pem.crt")}),
        "client cert data not base64": with_user(
            port, **{"client-certificate-data": "%%%", "client-key-data": b64(PEM_GARBAGE)}
        ),
        "client cert without key": with_user(port, **{"client-certificate-data": b64(PEM_GARBAGE)}),
        "client cert PEM of garbage": with_user(
            port, **{"client-certificate-data": b64(PEM_GARBAGE), "client-key-data": b64(PEM_GARBAGE)}
        ),
        "token file missing": with_user(port, tokenFile="absent-token"),
        "exec plugin not installed": with_user(
            port, exec={"apiVersion": "client.authentication.k8s.io/v1beta1", "command": "no-such-plugin-xyz"}
        ),
        "exec apiVersion unsupported": with_user(
            port, exec={"apiVersion": "client.authentication.k8s.io/v1", "command": "true"}
        ),
        "exec args not strings": with_user(
            port,
            exec={"apiVersion": "client.authentication.k8s.io/v1beta1", "command": "true", "args": [1, 2]},
        ),
        "auth-provider only": with_user(port, **{"auth-provider": {"name": "oidc"}}),
        "path missing": lambda d: d / "absent-kubeconfig",
        "path a directory": lambda d: d / "ca-dir",
        "path a symlink loop": symlink_loop,
        "path a FIFO": fifo,
        "path /dev/null": lambda _: Path("/dev/null"),
        "path /dev/zero": lambda _: Path("/dev/zero"),
        "path larger than 4 MiB": sparse_file,
    }


def symlink_loop(directory: Path) -> Path:
    first, second = directory / "loop-a", directory / "loop-b"
    if not first.is_symlink():
        first.symlink_to(second)
        second.symlink_to(first)
    return first


def fifo(directory: Path) -> Path:
    path = directory / "a-fifo"
    if not path.exists():
        os.mkfifo(path)
    return path


def sparse_file(directory: Path) -> Path:
    path = directory / "huge"
    with path.open("wb") as handle:
        handle.truncate(5 * 1024 * 1024)  # sparse: no disk used; the size alone is refused
    return path


def image_table(inputs: Path) -> dict[str, Callable[[Path], Path]]:
    """Name → a function making the image path (content or a special file) under ``inputs``."""

    def content(name: str, data: bytes) -> Callable[[Path], Path]:
        def make(directory: Path) -> Path:
            path = directory / name
            path.write_bytes(data)
            return path

        return make

    qcow2 = build.qcow2()
    noise = bytes((i * 131 + 7) % 256 for i in range(8192))
    return {
        "empty": content("empty.qcow2", b""),
        "truncated qcow2": content("cut.qcow2", qcow2[:40]),
        "garbage behind the qcow2 magic": content("junk.qcow2", b"QFI\xfb" + noise),
        "garbage behind the gzip magic": content("junk.img.gz", b"\x1f\x8b\x08\x00" + noise),
        "garbage behind the xz magic": content("junk.img.xz", b"\xfd7zXZ\x00" + noise),
        "garbage behind the zstd magic": content("junk.img.zst", b"\x28\xb5\x2f\xfd" + noise),
        "garbage behind the VMDK magic": content("junk.vmdk", b"KDMV" + noise),
        "garbage behind the VHDX magic": content("junk.vhdx", b"vhdxfile" + noise),
        "a directory": directory_in,
        "a symlink loop": symlink_loop,
        "a dangling symlink": dangling,
        "a FIFO": fifo,
        "/dev/null": lambda _: Path("/dev/null"),
        "/dev/zero": lambda _: Path("/dev/zero"),
        "missing": lambda d: d / "absent.qcow2",
    }


def directory_in(directory: Path) -> Path:
    path = directory / "image-dir"
    path.mkdir(exist_ok=True)
    return path


def dangling(directory: Path) -> Path:
    path = directory / "dangling.qcow2"
    if not path.is_symlink():
        path.symlink_to(directory / "nowhere.qcow2")
    return path


# ---------------------------------------------------------------------------------------------- the cases


@dataclass(frozen=True)
class Case:
    """One command line; ``OUT`` in it is a path inside the run directory that must never appear."""

    id: str
    argv: tuple[str, ...]
    parser: bool = False
    """typer itself refuses it (its own usage message, not our ``error:`` line)."""
    codes: tuple[int, ...] = (1, 2)
    env: dict[str, str] = field(default_factory=dict)


KUBE_COMMANDS: dict[str, tuple[str, ...]] = {
    "inventory": ("inventory", "--kubeconfig", "KC"),
    "inventory --pools --json": ("inventory", "--pools", "--json", "--kubeconfig", "KC"),
    "power start": ("power", "start", "web", "--kubeconfig", "KC"),
    "power stop": ("power", "stop", "web", "-n", "apps", "--kubeconfig", "KC"),
    "power restart": ("power", "restart", "web", "--kubeconfig", "KC"),
    "verify": ("verify", "web", "--kubeconfig", "KC"),
    "verify --json": ("verify", "web", "--json", "--kubeconfig", "KC"),
    "compliance validate": ("compliance", "validate", "--kubeconfig", "KC", "--output", "OUT/ar.yaml"),
    "upload": ("upload", "IMG", "--name", "web", "--kubeconfig", "KC"),
}
IMAGE_COMMANDS: dict[str, tuple[str, ...]] = {
    "prep --zarf -o": ("prep", "IMAGE", "--zarf", "--output-dir", "OUT"),
    "prep --golden-image --json": (
        "prep",
        "IMAGE",
        "--json",
        "--golden-image",
        "--data-source-name",
        "g",
        "-o",
        "OUT",
    ),
    "upload": ("upload", "IMAGE", "--name", "web", "--kubeconfig", "GOOD", "--uploadproxy-url", "PROXY"),
}
FLAG_CASES: list[Case] = [
    Case("prep bad --name", ("prep", "IMG", "--name", "Bad_Name", "-o", "OUT")),
    Case("prep --namespace too long", ("prep", "IMG", "--namespace", "n" * 64, "-o", "OUT")),
    Case("prep empty --namespace", ("prep", "IMG", "--namespace", "", "-o", "OUT")),
    Case("prep --golden-image alone", ("prep", "IMG", "--golden-image", "-o", "OUT")),
    Case("prep --data-source-name alone", ("prep", "IMG", "--data-source-name", "d", "-o", "OUT")),
    Case(
        "prep bad --data-source-name",
        ("prep", "IMG", "--golden-image", "--data-source-name", "D!", "-o", "OUT"),
    ),
    Case("prep -o is a file", ("prep", "IMG", "-o", "IMG")),
    Case("prep unknown flag", ("prep", "IMG", "--frobnicate"), parser=True),
    Case("prep no image", ("prep",), parser=True),
    Case("upload --wait-secs -1", ("upload", "IMG", "--name", "web", "--wait-secs", "-1"), parser=True),
    Case("upload --wait-secs abc", ("upload", "IMG", "--name", "web", "--wait-secs", "abc"), parser=True),
    Case("upload without --name", ("upload", "IMG"), parser=True),
    Case(
        "upload ftp proxy",
        ("upload", "IMG", "--name", "web", "--kubeconfig", "GOOD", "--uploadproxy-url", "ftp://x"),
    ),
    Case(
        "upload --insecure and --ca-file",
        ("upload", "IMG", "--name", "web", "--insecure", "--ca-file", "IMG"),
    ),
    Case("upload --ca-file missing", ("upload", "IMG", "--name", "web", "--ca-file", "INPUTS/absent-ca.pem")),
    Case("inventory -n and -A", ("inventory", "-n", "a", "-A", "--kubeconfig", "GOOD")),
    Case("inventory unknown flag", ("inventory", "--frobnicate"), parser=True),
    Case("power unknown action", ("power", "reboot", "web"), parser=True),
    Case("power without name", ("power", "start"), parser=True),
    Case("verify without name", ("verify",), parser=True),
    Case("compliance -n and -A", ("compliance", "validate", "-n", "a", "-A", "-o", "OUT/ar.yaml")),
    Case("compliance --component missing", ("compliance", "validate", "--component", "INPUTS/absent.yaml")),
    Case("compliance --component a directory", ("compliance", "validate", "--component", "INPUTS")),
    Case("compliance --component /dev/zero", ("compliance", "validate", "--component", "/dev/zero")),
    Case("compliance --component a FIFO", ("compliance", "validate", "--component", "FIFO")),
    Case("compliance --component binary", ("compliance", "validate", "--component", "INPUTS/binary.yaml")),
    Case("compliance --component bad YAML", ("compliance", "validate", "--component", "INPUTS/bad.yaml")),
    Case("compliance --component a list", ("compliance", "validate", "--component", "INPUTS/list.yaml")),
    Case("compliance unknown subcommand", ("compliance", "frobnicate"), parser=True),
    Case(
        "golden-image bad namespace",
        ("golden-image", "rbac", "--image-namespace", "Gold!", "--consumer-namespace", "a", "-o", "OUT"),
    ),
    Case(
        "golden-image --quota alone",
        (
            "golden-image",
            "rbac",
            "--image-namespace",
            "g",
            "--consumer-namespace",
            "a",
            "--quota",
            "-o",
            "OUT",
        ),
    ),
    Case(
        "golden-image bad service account",
        (
            "golden-image",
            "rbac",
            "--image-namespace",
            "g",
            "--consumer-namespace",
            "a",
            "--service-account",
            "x",
            "-o",
            "OUT",
        ),
    ),
    Case(
        "golden-image -o in a missing dir",
        (
            "golden-image",
            "rbac",
            "--image-namespace",
            "g",
            "--consumer-namespace",
            "a",
            "-o",
            "OUT/sub/rbac.yaml",
        ),
    ),
    Case(
        "golden-image -o a directory",
        ("golden-image", "rbac", "--image-namespace", "g", "--consumer-namespace", "a", "-o", "INPUTS"),
    ),
    Case("golden-image no consumer", ("golden-image", "rbac", "--image-namespace", "g"), parser=True),
    Case("version unknown flag", ("version", "--frobnicate"), parser=True),
    Case("unknown command", ("frobnicate",), parser=True),
]


def kube_cases(names: list[str]) -> list[Case]:
    return [
        Case(f"{command} x kubeconfig {name}", tuple("KCFILE:" + name if a == "KC" else a for a in argv))
        for name in names
        for command, argv in KUBE_COMMANDS.items()
    ]


def image_cases(names: list[str]) -> list[Case]:
    return [
        Case(f"{command} x image {name}", tuple("IMAGEFILE:" + name if a == "IMAGE" else a for a in argv))
        for name in names
        for command, argv in IMAGE_COMMANDS.items()
    ]


def _names_without_side_effects() -> tuple[list[str], list[str]]:
    """The table keys (built against a scratch directory: the builders create a few helper files)."""
    import tempfile  # noqa: PLC0415

    with tempfile.TemporaryDirectory() as scratch:
        return list(kubeconfig_table(1, Path(scratch))), list(image_table(Path(scratch)))


KUBECONFIG_NAMES, IMAGE_NAMES = _names_without_side_effects()
ALL_CASES = kube_cases(KUBECONFIG_NAMES) + image_cases(IMAGE_NAMES) + FLAG_CASES


# ------------------------------------------------------------------------------------------- the harness


@dataclass
class World:
    """The inputs: every hostile file, a valid image, and a kubeconfig that is fine but unreachable."""

    inputs: Path
    kubeconfigs: dict[str, Path]
    images: dict[str, Path]
    good_kubeconfig: Path
    raw_image: Path
    fifo: Path
    port: int


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, refused_port: int) -> World:
    inputs = tmp_path_factory.mktemp("inputs")
    kubeconfigs: dict[str, Path] = {}
    for index, (name, spec) in enumerate(kubeconfig_table(refused_port, inputs).items()):
        if callable(spec):
            kubeconfigs[name] = spec(inputs)
            continue
        path = inputs / f"kubeconfig-{index:02d}.yaml"
        path.write_bytes(spec if isinstance(spec, bytes) else yaml.safe_dump(spec).encode())
        kubeconfigs[name] = path
    images = {name: make(inputs) for name, make in image_table(inputs).items()}
    good = inputs / "good-kubeconfig.yaml"
    good.write_text(yaml.safe_dump(kubeconfig(refused_port)))
    raw = inputs / "web.img"
    raw.write_bytes(bytes(1 << 20))
    (inputs / "binary.yaml").write_bytes(bytes(range(256)))
    (inputs / "bad.yaml").write_text("component-definition: [\n")
    (inputs / "list.yaml").write_text("- a\n- b\n")
    return World(inputs, kubeconfigs, images, good, raw, fifo(inputs), refused_port)


def concrete(case: Case, world: World, out: Path) -> list[str]:
    """The case's argv with placeholders replaced by this run's paths."""
    fixed = {
        "IMG": str(world.raw_image),
        "GOOD": str(world.good_kubeconfig),
        "FIFO": str(world.fifo),
        "PROXY": f"https://127.0.0.1:{world.port}",
    }
    replaced = []
    for raw in case.argv:
        if raw.startswith("KCFILE:"):
            arg = str(world.kubeconfigs[raw.removeprefix("KCFILE:")])
        elif raw.startswith("IMAGEFILE:"):
            arg = str(world.images[raw.removeprefix("IMAGEFILE:")])
        else:
            arg = fixed.get(raw, raw)
        replaced.append(arg.replace("OUT", str(out)).replace("INPUTS", str(world.inputs)))
    return replaced


def snapshot(directory: Path) -> dict[str, tuple[int, int]]:
    """Every entry under ``directory`` (not following links) with its size and mtime."""
    found = {}
    for root, dirs, files in os.walk(directory):
        for name in dirs + files:
            path = Path(root, name)
            info = path.lstat()
            found[str(path.relative_to(directory))] = (info.st_size, info.st_mtime_ns)
    return found


def assert_refused(case: Case, code: int, stdout: str, stderr: str) -> None:
    """The contract of the sweep for one outcome."""
    context = f"{case.id}: exit {code}\nstdout: {stdout[-2000:]}\nstderr: {stderr[-2000:]}"
    assert code in case.codes, context
    assert TRACEBACK not in stdout and TRACEBACK not in stderr, context
    assert stderr.strip(), context
    if case.parser:
        assert "Usage" in stderr or "Error" in stderr, context
        return
    error_lines = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert len(error_lines) == 1, context
    assert "unexpected" not in error_lines[0], f"an expected failure was reported as a bug: {context}"


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No kubeconfig, debug switch or home of the machine leaks into a case."""
    for name in ("KUBECONFIG", "UDS_VMCTL_DEBUG", "KUBERNETES_SERVICE_HOST"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    monkeypatch.chdir(run_dir)
    return run_dir


# -------------------------------------------------------------------------------------------- the sweep


@pytest.mark.parametrize("case", ALL_CASES, ids=[c.id for c in ALL_CASES])
def test_in_process(case: Case, world: World, clean_env: Path) -> None:
    out = clean_env / "out"
    before = snapshot(world.inputs)
    result = CliRunner().invoke(app, concrete(case, world, out))
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert_refused(case, result.exit_code, result.stdout, result.stderr)
    assert not out.exists(), f"{case.id}: wrote {sorted(snapshot(out)) if out.is_dir() else out}"
    assert list(clean_env.iterdir()) == [], f"{case.id}: left {list(clean_env.iterdir())}"
    assert snapshot(world.inputs) == before, f"{case.id}: changed its inputs"


def subprocess_cases() -> list[Case]:
    """Every third kubeconfig and flag case and every image case, rotating over the commands.

    A process start costs ~0.3 s of CPU; the in-process sweep covers every case, this part proves the
    console script adds no traceback of its own for each kind of input.
    """
    kube = [
        kube_cases([name])[index % len(KUBE_COMMANDS)]
        for index, name in enumerate(KUBECONFIG_NAMES)
        if index % 3 == 0
    ]
    images = [image_cases([name])[index % len(IMAGE_COMMANDS)] for index, name in enumerate(IMAGE_NAMES)]
    return kube + images + FLAG_CASES[::3]


def test_as_a_real_process(world: World, tmp_path: Path) -> None:
    """The installed console script, so an exception escaping ``main`` or printed at exit would show."""
    assert CLI.exists(), "install the package first: make install"
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("KUBECONFIG", "UDS_VMCTL_DEBUG", "KUBERNETES_SERVICE_HOST")
    }
    env.update(HOME=str(tmp_path / "home"), COLUMNS="200")
    cases = subprocess_cases()

    def run(indexed: tuple[int, Case]) -> tuple[Case, Path, subprocess.CompletedProcess[str]]:
        index, case = indexed
        run_dir = tmp_path / f"run-{index:03d}"
        run_dir.mkdir()
        argv = concrete(case, world, run_dir / "out")
        done = subprocess.run(
            [str(CLI), *argv], cwd=run_dir, env=env, capture_output=True, text=True, check=False, timeout=120
        )
        return case, run_dir, done

    with ThreadPoolExecutor(max_workers=4) as pool:
        outcomes = list(pool.map(run, enumerate(cases)))
    for case, run_dir, done in outcomes:
        assert_refused(case, done.returncode, done.stdout, done.stderr)
        assert list(run_dir.iterdir()) == [], f"{case.id}: left {list(run_dir.iterdir())}"
    assert len(outcomes) == len(cases) >= 40


# ------------------------------------------------------------------- specific promises behind the sweep


def test_kubeconfig_messages_name_the_file_the_defect_and_the_fix(world: World, clean_env: Path) -> None:
    expectations = {
        "a string": "not a mapping with clusters, contexts and users",
        "binary": "is binary",
        "missing user": "uses user 'engineer', which is not in users",
        "missing cluster": "uses cluster 'site', which is not in clusters",
        "current-context unknown": "'elsewhere' is not one of its contexts ('field')",
        "server not a URL": "server 'not a url' is not a usable URL; write it as https://HOST:PORT",
        "CA data not base64": "certificate-authority-data is not valid base64",
        "token a number": "user.token is a number, expected a string",
        "path /dev/zero": "is not a regular file",
        "path a symlink loop": "too many levels of symbolic links",
    }
    for name, fragment in expectations.items():
        path = world.kubeconfigs[name]
        result = CliRunner().invoke(app, ["inventory", "--kubeconfig", str(path)])
        assert result.exit_code == 2, (name, result.stderr)
        line = result.stderr.strip()
        assert line.startswith(f"error: kubeconfig {path}"), (name, line)
        assert fragment.lower() in line.lower(), (name, line)
        assert "\n" not in line


def test_kubeconfig_from_the_environment_is_checked_alike(
    world: World, clean_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(world.kubeconfigs["a list"]))
    result = CliRunner().invoke(app, ["power", "start", "web"])
    assert result.exit_code == 2 and "not a mapping" in result.stderr
    monkeypatch.setenv(
        "KUBECONFIG", os.pathsep.join([str(world.good_kubeconfig), str(world.good_kubeconfig)])
    )
    result = CliRunner().invoke(app, ["verify", "web"])
    assert result.exit_code == 2 and "lists several files" in result.stderr
    monkeypatch.delenv("KUBECONFIG")
    result = CliRunner().invoke(app, ["inventory"])
    assert result.exit_code == 2 and ".kube/config: does not exist" in result.stderr


def test_a_valid_kubeconfig_reaches_the_network_step(world: World, clean_env: Path) -> None:
    """The checks refuse only what is wrong: the good kubeconfig gets as far as the (refused) connection."""
    result = CliRunner().invoke(app, ["inventory", "--kubeconfig", str(world.good_kubeconfig)])
    assert result.exit_code == 1
    assert "cannot reach the API server" in result.stderr


def test_prep_writes_no_manifest_when_one_cannot_be_written(world: World, clean_env: Path) -> None:
    """All or none: a later file that cannot be written leaves no earlier one behind (nor a temporary)."""
    out = clean_env / "out"
    (out / "zarf-component.yaml").mkdir(parents=True)
    result = CliRunner().invoke(
        app, ["prep", str(world.raw_image), "--name", "web", "--zarf", "-o", str(out)]
    )
    assert result.exit_code == 2, result.stderr
    assert "cannot write --output-dir" in result.stderr and TRACEBACK not in result.stderr
    assert sorted(p.name for p in out.iterdir()) == ["zarf-component.yaml"]
    result = CliRunner().invoke(
        app, ["prep", str(world.raw_image), "--name", "web", "-o", str(clean_env / "ok")]
    )
    assert result.exit_code == 0, result.stderr
    assert sorted(p.name for p in (clean_env / "ok").iterdir()) == [
        "web.image-record.configmap.yaml",
        "web.image-record.json",
        "web.udsvm.yaml",
    ]


# ------------------------------------------------------------------- an unexpected exception (a bug)


def boom(*_: object, **__: object) -> None:
    raise ZeroDivisionError("division by zero")


def test_a_bug_ends_in_one_line_and_debug_shows_the_traceback(
    world: World, clean_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from uds_vm_operator.cli import power  # noqa: PLC0415

    monkeypatch.setattr(power, "_power", boom)
    argv = ["power", "start", "web", "--kubeconfig", str(world.good_kubeconfig)]
    quiet = CliRunner().invoke(app, argv)
    assert quiet.exit_code == 1
    assert quiet.stderr.strip().splitlines() == [
        "error: unexpected ZeroDivisionError: division by zero; this is a bug in uds-vmctl: run it again "
        "with --debug (or UDS_VMCTL_DEBUG=1) and report the traceback"
    ]
    loud = CliRunner().invoke(app, ["--debug", *argv])
    assert loud.exit_code == 1 and TRACEBACK in loud.stderr and "in boom" in loud.stderr
    assert loud.stderr.strip().splitlines()[-1].startswith("error: unexpected ZeroDivisionError")
    monkeypatch.setenv("UDS_VMCTL_DEBUG", "1")
    assert TRACEBACK in CliRunner().invoke(app, argv).stderr


def test_an_interrupt_is_exit_130_in_one_line(
    world: World, clean_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from uds_vm_operator.cli import power  # noqa: PLC0415

    def interrupt(*_: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(power, "_power", interrupt)
    result = CliRunner().invoke(app, ["power", "stop", "web", "--kubeconfig", str(world.good_kubeconfig)])
    assert (result.exit_code, result.stderr.strip()) == (130, "error: interrupted")


BUGGY_VERSION = """
import platform, sys
platform.python_version = lambda: 1 / 0
from uds_vm_operator.cli.main import main
sys.argv = ["uds-vmctl", *sys.argv[1:]]
main()
"""
BROKEN_INSTALL = """
import sys
sys.modules["uds_vm_operator.cli.version"] = None  # importing the command module now fails
from uds_vm_operator.cli.main import main
sys.argv = ["uds-vmctl", *sys.argv[1:]]
main()
"""


@pytest.mark.parametrize(
    ("program", "expected"),
    [
        (BUGGY_VERSION, "error: unexpected ZeroDivisionError"),
        (BROKEN_INSTALL, "error: unexpected ModuleNotFoundError"),
    ],
    ids=["bug in a command", "broken installation"],
)
def test_a_bug_in_a_real_process(program: str, expected: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "UDS_VMCTL_DEBUG"}
    quiet = subprocess.run(
        [sys.executable, "-c", program, "version"], env=env, capture_output=True, text=True, check=False
    )
    assert quiet.returncode == 1, quiet.stderr
    assert TRACEBACK not in quiet.stderr and quiet.stdout == ""
    (line,) = quiet.stderr.strip().splitlines()
    assert line.startswith(expected) and "--debug" in line
    loud = subprocess.run(
        [sys.executable, "-c", program, "--debug", "version"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert loud.returncode == 1 and TRACEBACK in loud.stderr
    assert loud.stderr.strip().splitlines()[-1].startswith(expected)
