"""Check a kubeconfig before the Kubernetes client reads it, so a bad one is refused in one line.

lightkube trusts its input: a file that is not a mapping, a field of the wrong type or a context naming a
missing user surfaces as ``AttributeError`` or ``KeyError`` deep inside it. Field engineers hand-edit
kubeconfigs and copy them across air gaps, so every command that talks to a cluster first runs
:func:`check_kubeconfig`, which reads the file (bounded: ``/dev/zero`` is not a kubeconfig) and names the
file, the entry, what is wrong and how to fix it. The rules mirror what lightkube accepts (its models are
strict about types, and it converts every entry, not only the current one), plus what only fails later
at connect time: the server URL, the certificate data, the files the kubeconfig points at.

The controller's reader (:mod:`uds_vm_operator.runtime.kubeconfig`) serves the operator, which runs
from a known, generated kubeconfig; it reports any defect as one generic message and treats a missing
user as anonymous. This module is the CLI's stricter, more talkative check; it imports only PyYAML.
"""

from __future__ import annotations

import base64
import binascii
import os
import shutil
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from uds_vm_operator.cli._errors import UsageError

MAX_KUBECONFIG_BYTES = 4 * 1024 * 1024
"""Real kubeconfigs are kilobytes; anything this large is the wrong file, and reading stays bounded."""
MAX_REFERENCED_FILE_BYTES = 1024 * 1024
SERVICE_ACCOUNT_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")
DEFAULT_KUBECONFIG = Path("~/.kube/config")
EXEC_API_VERSIONS = ("client.authentication.k8s.io/v1alpha1", "client.authentication.k8s.io/v1beta1")
"""The exec-credential versions lightkube's client speaks."""
PEM_MARKER = b"-----BEGIN "
REGENERATE_HINT = "export it again, e.g. kubectl config view --raw --minify > FILE, or pass --kubeconfig PATH"

_TYPE_NAMES = {str: "a string", bool: "true/false", int: "a number", float: "a number", list: "a list"}
_CONTEXT_FIELDS: dict[str, type] = {"cluster": str, "user": str, "namespace": str}
_CLUSTER_FIELDS: dict[str, type] = {
    "server": str,
    "certificate-authority": str,
    "certificate-authority-data": str,
    "insecure-skip-tls-verify": bool,
}
_USER_FIELDS: dict[str, type] = {
    "exec": dict,
    "username": str,
    "password": str,
    "token": str,
    "tokenFile": str,
    "auth-provider": dict,
    "client-certificate": str,
    "client-certificate-data": str,
    "client-key": str,
    "client-key-data": str,
}
_EXEC_FIELDS: dict[str, type] = {
    "apiVersion": str,
    "command": str,
    "env": list,
    "args": list,
    "installHint": str,
}


class KubeconfigProblem(UsageError):  # noqa: N818 (a problem of the user's file, not an error of ours)
    """The kubeconfig cannot be used; the message names the file, the defect and the fix (exit 2)."""

    def __init__(self, source: str | Path, problem: str, fix: str = REGENERATE_HINT) -> None:
        super().__init__(f"kubeconfig {source}: {problem}; {fix}")


def resolve_kubeconfig(explicit: str | Path | None, environ: Mapping[str, str] = os.environ) -> Path | None:
    """The kubeconfig file a command will use, or ``None`` inside a pod (the service account).

    Same order as the Kubernetes client: ``--kubeconfig``, the in-cluster service account, ``$KUBECONFIG``,
    ``~/.kube/config``. The client reads ``$KUBECONFIG`` as one path, so a list is refused rather than
    half-read.
    """
    if explicit is not None and str(explicit) != "":
        return Path(explicit).expanduser()
    if environ.get("KUBERNETES_SERVICE_HOST") and SERVICE_ACCOUNT_TOKEN.is_file():
        return None
    from_env = environ.get("KUBECONFIG", "")
    if from_env:
        paths = [p for p in from_env.split(os.pathsep) if p]
        if len(paths) > 1:
            raise KubeconfigProblem(
                f"$KUBECONFIG={from_env}",
                "lists several files, and uds-vmctl reads exactly one",
                "pass --kubeconfig PATH (or merge them: kubectl config view --flatten > FILE)",
            )
        return Path(paths[0] if paths else from_env).expanduser()
    default = DEFAULT_KUBECONFIG.expanduser()
    if not default.exists():
        raise KubeconfigProblem(
            default,
            "does not exist, and neither --kubeconfig nor $KUBECONFIG is given",
            "pass --kubeconfig PATH or set KUBECONFIG",
        )
    return default


def check_kubeconfig(path: Path) -> None:
    """Refuse ``path`` with a :class:`KubeconfigProblem` unless its current context can be connected."""
    config = _read_mapping(path)
    contexts = _named_entries(path, config, "contexts", "context", _CONTEXT_FIELDS, required=True)
    clusters = _named_entries(path, config, "clusters", "cluster", _CLUSTER_FIELDS, required=True)
    users = _named_entries(path, config, "users", "user", _USER_FIELDS, required=False)
    current = config.get("current-context")
    if current is None or current == "":
        raise KubeconfigProblem(
            path,
            f"has no current-context (its contexts: {_names(contexts)})",
            "choose one: kubectl --kubeconfig FILE config use-context NAME",
        )
    if not isinstance(current, str):
        raise KubeconfigProblem(path, f"current-context is {_type_name(current)}, not a context name")
    if current not in contexts:
        raise KubeconfigProblem(
            path,
            f"current-context {current!r} is not one of its contexts ({_names(contexts)})",
            "choose one: kubectl --kubeconfig FILE config use-context NAME",
        )
    context = contexts[current]
    cluster_name = context.get("cluster")
    if not cluster_name:
        raise KubeconfigProblem(path, f"context {current!r} names no cluster", "add context.cluster to it")
    if cluster_name not in clusters:
        raise KubeconfigProblem(
            path,
            f"context {current!r} uses cluster {cluster_name!r}, which is not in clusters "
            f"({_names(clusters)})",
            "add that cluster or point the context at an existing one",
        )
    _check_cluster(path, str(cluster_name), clusters[cluster_name])
    user_name = context.get("user")
    if user_name:
        if user_name not in users:
            raise KubeconfigProblem(
                path,
                f"context {current!r} uses user {user_name!r}, which is not in users ({_names(users)})",
                "add that user's credentials or point the context at an existing user",
            )
        _check_user(path, str(user_name), users[user_name])


def _read_mapping(path: Path) -> dict[str, Any]:
    import yaml  # noqa: PLC0415 (lazy: only commands that talk to a cluster need it)

    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            raise KubeconfigProblem(path, "is not a regular file (a directory or a device)")
        if info.st_size > MAX_KUBECONFIG_BYTES:
            raise KubeconfigProblem(path, f"is {info.st_size} bytes, far too large for a kubeconfig")
        with path.open("rb") as handle:
            data = handle.read(MAX_KUBECONFIG_BYTES + 1)
    except FileNotFoundError:
        raise KubeconfigProblem(path, "does not exist", "pass --kubeconfig PATH or set KUBECONFIG") from None
    except OSError as exc:
        raise KubeconfigProblem(path, f"cannot be read ({exc.strerror or exc})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise KubeconfigProblem(path, f"is binary, not YAML text (byte {exc.start} is not UTF-8)") from None
    if "\x00" in text:
        raise KubeconfigProblem(path, "is binary, not YAML text (it contains NUL bytes)")
    try:
        config = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        raise KubeconfigProblem(path, f"is not valid YAML ({where}{exc.problem})") from None
    except yaml.YAMLError as exc:
        raise KubeconfigProblem(path, f"is not valid YAML ({type(exc).__name__})") from None
    except RecursionError:
        raise KubeconfigProblem(path, "is nested far too deeply to be a kubeconfig") from None
    if config is None:
        raise KubeconfigProblem(path, "is empty")
    if not isinstance(config, dict):
        raise KubeconfigProblem(
            path, f"is {_type_name(config)} in YAML, not a mapping with clusters, contexts and users"
        )
    return config


def _named_entries(
    path: Path,
    config: Mapping[str, Any],
    section: str,
    key: str,
    fields: Mapping[str, type],
    *,
    required: bool,
) -> dict[str, dict[str, Any]]:
    """``section``'s entries by name, each checked: the client converts them all, not only the current."""
    entries = config.get(section)
    if entries is None:
        if required:
            raise KubeconfigProblem(path, f"has no {section}")
        return {}
    if not isinstance(entries, list):
        raise KubeconfigProblem(
            path, f"{section} is {_type_name(entries)}, not a list of named {key} entries"
        )
    found: dict[str, dict[str, Any]] = {}
    for index, entry in enumerate(entries):
        where = f"{section}[{index}]"
        if not isinstance(entry, dict):
            raise KubeconfigProblem(
                path, f"{where} is {_type_name(entry)}, not a mapping with name and {key}"
            )
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            raise KubeconfigProblem(path, f"{where} has no name (a non-empty string)")
        body = entry.get(key)
        if body is None:
            raise KubeconfigProblem(path, f"{where} ({name!r}) has no {key} mapping")
        if not isinstance(body, dict):
            raise KubeconfigProblem(path, f"{where} ({name!r}): {key} is {_type_name(body)}, not a mapping")
        for field, expected in fields.items():
            value = body.get(field)
            if value is not None and not _is(value, expected):
                raise KubeconfigProblem(
                    path,
                    f"{where} ({name!r}): {key}.{field} is {_type_name(value)}, expected "
                    f"{_type_name_of(expected)}",
                )
        found[name] = body
    return found


def _check_cluster(path: Path, name: str, cluster: Mapping[str, Any]) -> None:
    server = cluster.get("server")
    if not server:
        raise KubeconfigProblem(path, f"cluster {name!r} has no server", "add server: https://HOST:PORT")
    try:
        url = urlsplit(str(server))
        port_ok = url.port is None or url.port > 0
    except ValueError:
        port_ok = False
        url = urlsplit("")
    if url.scheme not in ("https", "http") or not url.hostname or not port_ok:
        raise KubeconfigProblem(
            path,
            f"cluster {name!r}: server {server!r} is not a usable URL",
            "write it as https://HOST:PORT (the API server's address)",
        )
    where = f"cluster {name!r}"
    _check_pem_data(path, where, "certificate-authority-data", cluster.get("certificate-authority-data"))
    _check_pem_file(path, where, "certificate-authority", cluster.get("certificate-authority"))


def _check_user(path: Path, name: str, user: Mapping[str, Any]) -> None:
    where = f"user {name!r}"
    for field in ("client-certificate-data", "client-key-data"):
        _check_pem_data(path, where, field, user.get(field))
    for field in ("client-certificate", "client-key"):
        _check_pem_file(path, where, field, user.get(field))
    has_cert = bool(user.get("client-certificate") or user.get("client-certificate-data"))
    has_key = bool(user.get("client-key") or user.get("client-key-data"))
    if has_cert != has_key:
        missing = "client-key(-data)" if has_cert else "client-certificate(-data)"
        raise KubeconfigProblem(path, f"{where} has half a client certificate: {missing} is missing")
    token_file = user.get("tokenFile")
    if token_file:
        _referenced_file(path, where, "tokenFile", token_file)
    exec_config = user.get("exec")
    if exec_config:
        _check_exec(path, where, exec_config)
    authenticates = any(
        user.get(f) for f in ("token", "tokenFile", "exec", "client-certificate", "client-certificate-data")
    )
    if (
        user.get("auth-provider")
        and not authenticates
        and not (user.get("username") and user.get("password"))
    ):
        raise KubeconfigProblem(
            path,
            f"{where} authenticates with an auth-provider, which uds-vmctl's client does not support",
            "use a token, a client certificate or an exec credential plugin",
        )


def _check_exec(path: Path, where: str, exec_config: Mapping[str, Any]) -> None:
    for field, expected in _EXEC_FIELDS.items():
        value = exec_config.get(field)
        if value is not None and not _is(value, expected):
            raise KubeconfigProblem(
                path, f"{where}: exec.{field} is {_type_name(value)}, expected {_type_name_of(expected)}"
            )
    version = exec_config.get("apiVersion")
    if version not in EXEC_API_VERSIONS:
        raise KubeconfigProblem(
            path,
            f"{where}: exec.apiVersion {version!r} is not supported",
            f"use {EXEC_API_VERSIONS[-1]}",
        )
    command = exec_config.get("command")
    if not command:
        raise KubeconfigProblem(path, f"{where}: exec has no command")
    if shutil.which(str(command)) is None:
        hint = exec_config.get("installHint") or "install it or fix exec.command"
        raise KubeconfigProblem(
            path, f"{where}: the exec credential plugin {command!r} is not found or not executable", str(hint)
        )
    if not all(isinstance(a, str) for a in exec_config.get("args") or []):
        raise KubeconfigProblem(path, f"{where}: exec.args must be a list of strings")
    for variable in exec_config.get("env") or []:
        if not (
            isinstance(variable, dict)
            and isinstance(variable.get("name"), str)
            and isinstance(variable.get("value"), str)
        ):
            raise KubeconfigProblem(path, f"{where}: every exec.env entry needs a string name and value")


def _check_pem_data(path: Path, where: str, field: str, value: Any) -> None:
    if not value:
        return
    try:
        decoded = base64.b64decode("".join(str(value).split()), validate=True)
    except (binascii.Error, ValueError):
        raise KubeconfigProblem(
            path,
            f"{where}: {field} is not valid base64",
            "paste the base64 of the PEM file (base64 -w0 FILE), or copy the kubeconfig again",
        ) from None
    if PEM_MARKER not in decoded:
        raise KubeconfigProblem(
            path,
            f"{where}: {field} decodes to something that is not PEM (no '-----BEGIN' line)",
            "paste the base64 of the PEM file (base64 -w0 FILE), or copy the kubeconfig again",
        )


def _check_pem_file(path: Path, where: str, field: str, value: Any) -> None:
    if not value:
        return
    target = _referenced_file(path, where, field, value)
    try:
        with target.open("rb") as handle:
            head = handle.read(MAX_REFERENCED_FILE_BYTES)
    except OSError as exc:
        raise KubeconfigProblem(path, f"{where}: {field} {target}: {exc.strerror or exc}") from None
    if PEM_MARKER not in head:
        raise KubeconfigProblem(
            path,
            f"{where}: {field} {target} is not a PEM file (no '-----BEGIN' line)",
            "point it at the PEM file",
        )


def _referenced_file(path: Path, where: str, field: str, value: Any) -> Path:
    """A file the kubeconfig names; relative paths are from the kubeconfig's directory (as kubectl reads)."""
    target = Path(str(value)).expanduser()
    if not target.is_absolute():
        target = path.parent / target
    fix = "fix the path (relative paths are from the kubeconfig's directory)"
    try:
        info = target.stat()
    except OSError as exc:
        raise KubeconfigProblem(path, f"{where}: {field} {target}: {exc.strerror or exc}", fix) from None
    if not stat.S_ISREG(info.st_mode):
        raise KubeconfigProblem(path, f"{where}: {field} {target} is not a regular file", fix)
    if not os.access(target, os.R_OK):
        raise KubeconfigProblem(path, f"{where}: {field} {target} is not readable", "check its permissions")
    return target


def _is(value: Any, expected: type) -> bool:
    if expected is str:
        return isinstance(value, str)
    if expected is bool:
        return isinstance(value, bool)
    return isinstance(value, expected)


def _type_name(value: Any) -> str:
    if isinstance(value, dict):
        return "a mapping"
    if value is None:
        return "empty"
    return _TYPE_NAMES.get(type(value), f"a {type(value).__name__}")


def _type_name_of(expected: type) -> str:
    return "a mapping" if expected is dict else _TYPE_NAMES.get(expected, expected.__name__)


def _names(entries: Mapping[str, Any]) -> str:
    return ", ".join(repr(n) for n in entries) if entries else "none"
