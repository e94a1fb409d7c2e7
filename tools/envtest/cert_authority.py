"""Throwaway PKI for the test control plane: CAs, serving and client certificates, kubeconfigs.

Like controller-runtime's envtest, every run mints fresh keys, so nothing secret is ever committed or reused.
ECDSA P-256 keys keep minting in the milliseconds; kube-apiserver accepts them for serving, client
authentication and service-account token signing.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = dt.timedelta(days=7)
_CLOCK_SKEW = dt.timedelta(minutes=5)


@dataclass(frozen=True)
class KeyPair:
    """A PEM certificate and its PEM private key."""

    cert_pem: bytes
    key_pem: bytes

    def write(self, cert_path: Path, key_path: Path) -> None:
        """Write both files; the key is readable by the owner only."""
        cert_path.write_bytes(self.cert_pem)
        _write_private(key_path, self.key_pem)


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _attribute(oid: x509.ObjectIdentifier, value: str) -> x509.NameAttribute[str]:
    """A name attribute without X.509's 64-character upper bound.

    Kubernetes takes the user from CN and groups from O, and ServiceAccount user names
    (`system:serviceaccount:<namespace>:<name>`) are routinely longer than 64 characters. Go's x509 (the API
    server) accepts longer values; `cryptography` enforces the RFC 5280 bound unless `_validate` is off, and
    then still warns, which we silence for exactly that message.
    """
    if not value:
        raise ValueError("certificate name attributes must not be empty")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Attribute's length must be", category=UserWarning)
        return x509.NameAttribute(oid, value, _validate=False)


def _name(common_name: str, organizations: tuple[str, ...] = ()) -> x509.Name:
    attributes = [_attribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    attributes.append(_attribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attributes)


class CertificateAuthority:
    """A self-signed CA that signs serving and client certificates for one control-plane run."""

    def __init__(self, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate) -> None:
        self._key = key
        self._cert = cert

    @classmethod
    def create(cls, common_name: str) -> CertificateAuthority:
        """Mint a new CA valid for a week (a run never lasts that long)."""
        key = _new_key()
        now = dt.datetime.now(dt.UTC)
        subject = _name(common_name)
        cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _CLOCK_SKEW)
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256())
        )
        return cls(key, cert)

    @classmethod
    def load(cls, cert_path: Path, key_path: Path) -> CertificateAuthority:
        """Load a CA written by `write`, e.g. to mint more client certificates for a running plane."""
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError(f"{key_path} is not an ECDSA key written by this module")
        return cls(key, x509.load_pem_x509_certificate(cert_path.read_bytes()))

    @property
    def cert_pem(self) -> bytes:
        return self._cert.public_bytes(serialization.Encoding.PEM)

    def write(self, cert_path: Path, key_path: Path) -> None:
        """Persist the CA (key owner-readable only)."""
        KeyPair(self.cert_pem, _key_pem(self._key)).write(cert_path, key_path)

    def issue(
        self,
        common_name: str,
        *,
        organizations: tuple[str, ...] = (),
        dns_names: tuple[str, ...] = (),
        ip_addresses: tuple[str, ...] = (),
        server: bool = False,
    ) -> KeyPair:
        """Sign a leaf certificate. Client certs carry the Kubernetes user in CN and its groups in O."""
        key = _new_key()
        now = dt.datetime.now(dt.UTC)
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name, organizations))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _CLOCK_SKEW)
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()), critical=False
            )
        )
        sans: list[x509.GeneralName] = [x509.DNSName(name) for name in dns_names]
        sans.extend(x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses)
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def service_account_signing_key() -> KeyPair:
    """A key pair for --service-account-signing-key-file / --service-account-key-file (public half as PEM)."""
    key = _new_key()
    public_pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return KeyPair(public_pem, _key_pem(key))


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def write_kubeconfig(path: Path, *, server: str, ca_pem: bytes, client: KeyPair, user: str) -> Path:
    """Write a one-context kubeconfig with embedded certificates (owner-readable only), like envtest does."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "envtest", "cluster": {"server": server, "certificate-authority-data": _b64(ca_pem)}}
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": _b64(client.cert_pem),
                    "client-key-data": _b64(client.key_pem),
                },
            }
        ],
        "contexts": [{"name": "envtest", "context": {"cluster": "envtest", "user": user}}],
        "current-context": "envtest",
    }
    _write_private(path, yaml.safe_dump(config, sort_keys=False).encode("utf-8"))
    return path
