"""A tiny signed Debian mirror on 127.0.0.1 for the guest tier, and the relay that lets a QEMU guest reach it.

The mirror holds a few real .debs (``apt-get download`` of the pins in versions.env, cached outside the clone)
plus a canary package built here with ``dpkg-deb`` (so a newer version can be published while a guest runs,
which is what proves unattended upgrades really use the mirror). Every suite Debian's cloud-init sources
template names is served (``bookworm``, ``-updates``, ``-security``, ``-backports``), binary and source
indexes, with ``Release`` files signed by an ed25519 key made for this run in a throwaway GNUPGHOME.

The guest reaches it through QEMU user networking: ``guestfwd=tcp:10.0.2.100:80-cmd:<relay>`` runs
``tcp_relay.py`` per guest connection, which connects to the HTTP server on 127.0.0.1. ``restrict=on`` stays
on, so nothing else is reachable from the guest.
"""

from __future__ import annotations

import gzip
import hashlib
import http.server
import os
import subprocess
import threading
from dataclasses import dataclass, field
from email.utils import formatdate
from pathlib import Path

_REPO = Path(__file__).resolve().parents[2]
GUEST_ADDRESS = "10.0.2.100"
"""The address the guest uses for the mirror (inside QEMU's user network; forwarded, never routed)."""
SUITES = {  # suite -> (Origin, Label): the labels unattended-upgrades' default Origins-Pattern matches
    "bookworm": ("Debian", "Debian"),
    "bookworm-updates": ("Debian", "Debian"),
    "bookworm-security": ("Debian", "Debian-Security"),
    "bookworm-backports": ("Debian Backports", "Debian Backports"),
}
CANARY = "uds-guest-canary"


def _pins() -> list[str]:
    for line in (_REPO / "versions.env").read_text().splitlines():
        if line.startswith("GUEST_MIRROR_PACKAGES="):
            return line.split("=", 1)[1].strip().strip('"').split()
    raise AssertionError("GUEST_MIRROR_PACKAGES missing from versions.env")


def cached_debs() -> list[Path]:
    """The pinned .debs, downloaded once into ~/.cache/uds-vm-operator/guest-mirror-debs-<pins hash>/."""
    pins = _pins()
    key = hashlib.sha256(" ".join(pins).encode()).hexdigest()[:16]
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "uds-vm-operator"
    directory = cache / f"guest-mirror-debs-{key}"
    stamp = directory / ".done"
    if not stamp.exists():
        partial = directory.with_name(directory.name + ".partial")
        partial.mkdir(parents=True, exist_ok=True)
        for attempt in range(2):  # a stale apt list on the host: update once, then give up
            done = subprocess.run(
                ["apt-get", "download", *pins],
                cwd=partial,
                capture_output=True,
                text=True,
                timeout=600,
                check=False,
            )
            if done.returncode == 0:
                break
            if attempt == 0:
                subprocess.run(["apt-get", "update", "-qq"], capture_output=True, timeout=600, check=False)
        else:
            raise AssertionError(f"apt-get download {' '.join(pins)} failed:\n{done.stderr[-2000:]}")
        if directory.exists():
            for old in directory.iterdir():
                old.unlink()
            directory.rmdir()
        partial.rename(directory)
        stamp.touch()
    debs = sorted(directory.glob("*.deb"))
    assert len(debs) == len(pins), debs
    return debs


def build_canary(directory: Path, version: str) -> Path:
    """A one-file package (``/usr/share/uds-guest-canary/version``) in the given version."""
    tree = directory / f"canary-{version}"
    (tree / "DEBIAN").mkdir(parents=True)
    (tree / "usr/share" / CANARY).mkdir(parents=True)
    (tree / "usr/share" / CANARY / "version").write_text(version + "\n")
    (tree / "DEBIAN" / "control").write_text(
        f"Package: {CANARY}\nVersion: {version}\nArchitecture: all\nMaintainer: guest tier <tier@invalid>\n"
        "Priority: optional\nSection: misc\nDescription: uds-vm-operator guest-tier canary\n"
        " Published on the test mirror to prove where a guest installs and upgrades from.\n"
    )
    deb = directory / f"{CANARY}_{version}_all.deb"
    subprocess.run(
        ["dpkg-deb", "--root-owner-group", "--build", str(tree), str(deb)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return deb


def _gpg(home: Path, *args: str, stdin: bytes | None = None) -> bytes:
    done = subprocess.run(
        ["gpg", "--homedir", str(home), "--batch", "--quiet", "--yes", *args],
        input=stdin,
        capture_output=True,
        timeout=300,
        check=False,
    )
    if done.returncode != 0:
        raise AssertionError(f"gpg {' '.join(args)} failed: {done.stderr.decode(errors='replace')}")
    return done.stdout


@dataclass
class SigningKey:
    """An ed25519 signing key made for one run; only its armored public half leaves the test."""

    home: Path
    fingerprint: str = ""
    armored: str = ""

    @classmethod
    def create(cls, home: Path) -> SigningKey:
        home.mkdir(mode=0o700, parents=True)
        uid = "uds-vm-operator guest-tier mirror <mirror@guest-tier.invalid>"
        _gpg(home, "--passphrase", "", "--quick-gen-key", uid, "ed25519", "sign", "1d")
        listing = _gpg(home, "--with-colons", "--list-keys", uid).decode()
        fingerprint = next(line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:"))
        armored = _gpg(home, "--armor", "--export", fingerprint).decode()
        return cls(home, fingerprint, armored)

    def close(self) -> None:
        """End the gpg-agent gpg started for this GNUPGHOME (gpgconf addresses it by its home, no name)."""
        subprocess.run(
            ["gpgconf", "--homedir", str(self.home), "--kill", "gpg-agent"],
            capture_output=True,
            timeout=60,
            check=False,
        )

    def sign(self, release: Path) -> None:
        """InRelease (clear-signed) and Release.gpg (detached), as Debian's archive publishes both."""
        key = ["--local-user", self.fingerprint, "--digest-algo", "SHA512"]
        _gpg(self.home, *key, "--clearsign", "--output", str(release.with_name("InRelease")), str(release))
        _gpg(self.home, *key, "--armor", "--detach-sign", "--output", str(release) + ".gpg", str(release))


def _stanza(deb: Path, filename: str) -> str:
    control = subprocess.run(
        ["dpkg-deb", "--field", str(deb)], check=True, capture_output=True, text=True, timeout=60
    ).stdout.rstrip("\n")
    data = deb.read_bytes()
    return (
        f"{control}\nFilename: {filename}\nSize: {len(data)}\n"
        f"MD5sum: {hashlib.md5(data).hexdigest()}\nSHA256: {hashlib.sha256(data).hexdigest()}\n"
    )


@dataclass
class AptMirror:
    """The mirror's tree (``<root>/debian``), its key, and an HTTP server on 127.0.0.1 that logs requests."""

    root: Path
    key: SigningKey
    debs: list[Path] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    port: int = 0
    _server: http.server.ThreadingHTTPServer | None = None

    @property
    def base(self) -> Path:
        return self.root / "debian"

    @property
    def guest_uri(self) -> str:
        """The mirror URI a guest is configured with (what goes into autoUpdate.aptMirror)."""
        return f"http://{GUEST_ADDRESS}/debian"

    def publish(self, debs: list[Path]) -> None:
        """(Re)write pool, indexes and signed Release files for ``debs`` (all in ``bookworm`` main)."""
        self.debs = list(debs)
        pool = self.base / "pool" / "main"
        pool.mkdir(parents=True, exist_ok=True)
        stanzas = []
        for deb in self.debs:
            target = pool / deb.name
            if not target.exists():
                target.write_bytes(deb.read_bytes())
            stanzas.append(_stanza(target, f"pool/main/{deb.name}"))
        for suite, (origin, label) in SUITES.items():
            dist = self.base / "dists" / suite
            packages = "\n".join(stanzas) if suite == "bookworm" else ""
            indexes = {"main/binary-amd64/Packages": packages.encode(), "main/source/Sources": b""}
            lines = []
            for name, content in indexes.items():
                for suffix, body in (("", content), (".gz", gzip.compress(content, mtime=0))):
                    path = dist / (name + suffix)
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_bytes(body)
                    lines.append(f" {hashlib.sha256(body).hexdigest()} {len(body):>8} {name}{suffix}")
            release = dist / "Release"
            release.write_text(
                f"Origin: {origin}\nLabel: {label}\nSuite: {suite.replace('bookworm', 'stable')}\n"
                f"Codename: {suite}\nDate: {formatdate(usegmt=True)}\nArchitectures: amd64\n"
                "Components: main\nDescription: uds-vm-operator guest-tier mirror\nSHA256:\n"
                + "\n".join(lines)
                + "\n"
            )
            self.key.sign(release)

    def start(self) -> None:
        """Serve the tree on 127.0.0.1 (a free port) from a daemon thread of this process."""
        log = self.requests
        root = str(self.root)

        class Handler(http.server.SimpleHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive: apt pipelines, and each connection costs a relay

            def __init__(self, *args: object, **kwargs: object) -> None:
                super().__init__(*args, directory=root, **kwargs)  # type: ignore[arg-type]

            def log_message(self, format: str, *args: object) -> None:
                log.append(f"{self.command} {self.path} {args[1] if len(args) > 1 else ''}".strip())

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, name="apt-mirror", daemon=True).start()

    def stop(self) -> None:
        self.key.close()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def guestfwd(self) -> str:
        """QEMU's ``guestfwd`` value that relays the guest's 10.0.2.100:80 to this server."""
        relay = Path(__file__).with_name("tcp_relay.py")
        python = os.environ.get("UDS_GUEST_RELAY_PYTHON", "/usr/bin/python3")
        return f"tcp:{GUEST_ADDRESS}:80-cmd:{python} {relay} {self.port}"
