"""Write kubeconform's JSON schemas from the real kube-apiserver (issue 32), offline.

kubeconform downloads its schemas from GitHub by default, which this machine cannot reach. The same schemas
come from the API server itself: tools/envtest starts the pinned kube-apiserver (K8S_VERSION) with the
project's CRDs (deploy/crds) installed, and its ``/openapi/v3`` documents describe every built-in kind and
every CRD kind. This converts them the way kubeconform's own schema repository is made
(``openapi2jsonschema``, "standalone-strict"):

- every ``$ref`` is inlined (standalone: one file per kind, no references between files); a type that contains
  itself (``JSONSchemaProps`` of a CustomResourceDefinition) is inlined once more inside itself, then cut to
  ``{}`` (anything): deeper levels of a CRD's own schema are not checked, the API server checks them;
- strict: an object with ``properties`` gets ``additionalProperties: false`` unless it preserves unknown
  fields, so a misspelt field is an error (as the API server's ``fieldValidation=Strict`` makes it);
- an optional field may be ``null`` (the API server treats null as unset).

Files are named as kubeconform's ``-schema-location`` template ``{{ .ResourceKind }}{{ .KindSuffix }}.json``
expects: ``{kind}-{first label of the group}-{version}.json`` lowercased, ``{kind}-{version}.json`` for the
core group (``deployment-apps-v1.json``, ``service-v1.json``, ``kopfpeering-kopf-v1.json``).

The folder is cached in ``~/.cache/uds-vm-operator/k8s-schemas-<K8S_VERSION>-<hash>/`` (hash of this file and
deploy/crds), so the plane starts only when the pinned version, the converter or a CRD changed.

Usage: python -m tools.scan.k8s_schemas   # prints the schema folder (writing it first if needed)
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tools.envtest.controlplane import (
    PROJECT_CRD_DIR,
    ControlPlane,
    load_crd_documents,
    running_control_plane,
)
from tools.envtest.pinned_versions import cache_root, pinned_versions

SCHEMA_LOCATION_TEMPLATE = "{{ .ResourceKind }}{{ .KindSuffix }}.json"
"""kubeconform's -schema-location, relative to the schema folder (kubeconform fills in kind and suffix)."""
STAMP = ".complete"
_REF_PREFIX = "#/components/schemas/"
_ANNOTATIONS = ("description", "default", "example")
_PUBLISH_TIMEOUT_S = 60.0
_MAX_SELF_NESTING = 2
"""How often one type may appear on its own path before it is cut: JSONSchemaProps inside JSONSchemaProps is
still checked (a CRD's top-level property schemas), the level below is not."""


class SchemaError(RuntimeError):
    """The API server's OpenAPI could not be turned into kubeconform schemas; the message says why."""


def cache_key() -> str:
    """The converter's source and the project's CRDs: either changing means the schemas change."""
    digest = hashlib.sha256(Path(__file__).read_bytes())
    for path in sorted(PROJECT_CRD_DIR.glob("*.yaml")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def schema_dir() -> Path:
    """Where the schemas of the pinned kube-apiserver live."""
    return cache_root() / f"k8s-schemas-{pinned_versions().k8s}-{cache_key()}"


def schema_file_name(kind: str, group: str, version: str) -> str:
    """kubeconform's name for a kind, ``{kind}{KindSuffix}.json``: KindSuffix has the group's first label."""
    suffix = f"-{group.split('.', maxsplit=1)[0]}-{version}" if group else f"-{version}"
    return f"{kind}{suffix}.json".lower()


def _inline(node: Any, definitions: dict[str, Any], path: tuple[str, ...]) -> Any:
    """Resolve every $ref below node; a definition already on the path too often is cut to {}."""
    if isinstance(node, list):
        return [_inline(item, definitions, path) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str):
        if not ref.startswith(_REF_PREFIX) or ref[len(_REF_PREFIX) :] not in definitions:
            raise SchemaError(f"unresolvable $ref {ref}")
        name = ref[len(_REF_PREFIX) :]
        if path.count(name) >= _MAX_SELF_NESTING:
            return {}
        rest = {key: value for key, value in node.items() if key != "$ref"}
        return {**_inline(definitions[name], definitions, (*path, name)), **_inline(rest, definitions, path)}
    inlined = {key: _inline(value, definitions, path) for key, value in node.items()}
    return _collapse_all_of(inlined)


def _collapse_all_of(node: dict[str, Any]) -> dict[str, Any]:
    """OpenAPI v3 wraps a described $ref as ``{allOf: [ref], description, default}``: merge it into one."""
    all_of = node.get("allOf")
    if not (isinstance(all_of, list) and len(all_of) == 1 and isinstance(all_of[0], dict)):
        return node
    extra = [key for key in node if key != "allOf" and key not in _ANNOTATIONS]
    if extra:
        return node
    merged = dict(all_of[0])
    if "description" in node:
        merged["description"] = node["description"]
    return merged


def _strict(node: Any, required: Iterable[str] = ()) -> Any:
    """Closed objects, nullable optional fields, annotations dropped (recursively)."""
    if isinstance(node, list):
        return [_strict(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("default", "example"):
            continue
        if key == "properties" and isinstance(value, dict):
            wanted = set(node.get("required", []))
            out[key] = {name: _nullable(_strict(prop), name not in wanted) for name, prop in value.items()}
        else:
            out[key] = _strict(value)
    preserves = out.get("x-kubernetes-preserve-unknown-fields") is True
    if "properties" in out and "additionalProperties" not in out and not preserves:
        out["additionalProperties"] = False
    if out.pop("nullable", False) is True:
        out = _nullable(out, True)
    return out


def _nullable(schema: Any, optional: bool) -> Any:
    """Let an optional field be null (the API server drops it), as kubeconform's own schemas do."""
    if not optional or not isinstance(schema, dict):
        return schema
    if isinstance(schema.get("enum"), list) and None not in schema["enum"]:
        schema = {**schema, "enum": [*schema["enum"], None]}
    kind = schema.get("type")
    if isinstance(kind, str):
        return {**schema, "type": [kind, "null"]}
    if isinstance(kind, list):
        return schema if "null" in kind else {**schema, "type": [*kind, "null"]}
    for key in ("oneOf", "anyOf"):
        if isinstance(schema.get(key), list) and {"type": "null"} not in schema[key]:
            return {**schema, key: [*schema[key], {"type": "null"}]}
    return schema


def convert_document(document: dict[str, Any], group: str, version: str) -> dict[str, dict[str, Any]]:
    """One group-version's OpenAPI v3 document → {file name: standalone strict JSON schema} for its kinds."""
    definitions: dict[str, Any] = document.get("components", {}).get("schemas", {})
    out: dict[str, dict[str, Any]] = {}
    for name, definition in definitions.items():
        for gvk in definition.get("x-kubernetes-group-version-kind", []):
            if gvk.get("group", "") != group or gvk.get("version") != version:
                continue
            schema = _strict(_inline(copy.deepcopy(definition), definitions, (name,)))
            schema.pop("x-kubernetes-group-version-kind", None)
            schema["$schema"] = "http://json-schema.org/schema#"
            out[schema_file_name(gvk["kind"], group, version)] = schema
    return out


def _group_version(path: str) -> tuple[str, str] | None:
    """``api/v1`` → ("", "v1"); ``apis/apps/v1`` → ("apps", "v1"); anything else (discovery roots) → None."""
    parts = path.split("/")
    if parts[0] == "api" and len(parts) == 2:
        return "", parts[1]
    if parts[0] == "apis" and len(parts) == 3:
        return parts[1], parts[2]
    return None


def _crd_group_versions() -> set[str]:
    """The ``apis/<group>/<version>`` paths the project's CRDs add to /openapi/v3 once they are published."""
    paths: set[str] = set()
    for crd in load_crd_documents([PROJECT_CRD_DIR]):
        spec = crd["spec"]
        for served in spec["versions"]:
            if served.get("served", True):
                paths.add(f"apis/{spec['group']}/{served['name']}")
    return paths


def _openapi_index(plane: ControlPlane, wanted: set[str]) -> dict[str, Any]:
    """/openapi/v3 once the CRDs' groups are in it (the server publishes a CRD's OpenAPI shortly after
    Established)."""
    deadline = time.monotonic() + _PUBLISH_TIMEOUT_S
    while True:
        paths: dict[str, Any] = plane.request("GET", "/openapi/v3")["paths"]
        missing = wanted - paths.keys()
        if not missing:
            return paths
        if time.monotonic() > deadline:
            raise SchemaError(
                f"the API server did not publish the OpenAPI of {', '.join(sorted(missing))} within "
                f"{_PUBLISH_TIMEOUT_S:.0f} s; see the kube-apiserver log of the plane"
            )
        time.sleep(0.5)


def write_schemas(plane: ControlPlane, target: Path) -> int:
    """Every kind the plane serves as a kubeconform schema file in target; returns how many were written."""
    paths = _openapi_index(plane, _crd_group_versions())
    origin: dict[str, str] = {}
    for path, entry in sorted(paths.items()):
        group_version = _group_version(path)
        if group_version is None:
            continue
        document = plane.request("GET", entry["serverRelativeURL"])
        for file_name, schema in convert_document(document, *group_version).items():
            if file_name in origin and origin[file_name] != path:
                raise SchemaError(f"{file_name} is written by both {origin[file_name]} and {path}")
            origin[file_name] = path
            (target / file_name).write_text(json.dumps(schema, indent=1, sort_keys=True), encoding="utf-8")
    return len(origin)


def ensure_schemas() -> Path:
    """The cached schema folder; on a miss, start a private plane (etcd + kube-apiserver + deploy/crds)."""
    final = schema_dir()
    if (final / STAMP).is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=final.name + ".tmp-", dir=final.parent))
    try:
        with running_control_plane(crd_folders=[PROJECT_CRD_DIR]) as plane:
            count = write_schemas(plane, work)
        (work / STAMP).write_text(f"{count} schemas from kube-apiserver {pinned_versions().k8s}\n")
        shutil.rmtree(final, ignore_errors=True)
        os.replace(work, final)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return final


def main() -> int:
    try:
        print(ensure_schemas())
    except (SchemaError, RuntimeError, OSError) as error:
        print(
            f"error: could not write kubeconform schemas: {error} (needs `make envtest-bins`)",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
