"""Strict JSON schemas for kubeconform, offline, from the Kubernetes OpenAPI document and the
Prometheus Operator's CRDs (README, Kubernetes: validating the chart).

    python deploy/helm/k8s_schemas.py SWAGGER_JSON CRD_DIR OUT_DIR

writes OUT_DIR/<kind>[-<group>]-<version>.json for every kind of the OpenAPI document (the
layout of kubeconform's default location, ``{{.ResourceKind}}{{.KindSuffix}}.json``) and
OUT_DIR/<group>/<kind>_<version>.json for every CRD version. Strict: every object schema that
lists its properties allows no others (as kubeconform's ``-strict`` schemas do), except where
the API says unknown fields are kept (``x-kubernetes-preserve-unknown-fields``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

#: definitions whose OpenAPI form is a string but whose values may also be numbers
_NUMERIC_STRINGS = {
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
    "io.k8s.apimachinery.pkg.api.resource.Quantity": {"oneOf": [{"type": "string"}, {"type": "number"}]},
}


def strict(schema: Any) -> Any:
    """``schema`` with ``additionalProperties: false`` on every object that lists properties."""
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: strict(v) for k, v in schema.items()}
    if out.get("format") == "int-or-string":
        return {"oneOf": [{"type": "string"}, {"type": "integer"}]}
    if "properties" in schema and "additionalProperties" not in schema:
        if not schema.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
    return out


def _refs(schema: Any, into: set[str]) -> None:
    if isinstance(schema, dict):
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/definitions/"):
            into.add(ref[len("#/definitions/") :])
        for value in schema.values():
            _refs(value, into)
    elif isinstance(schema, list):
        for value in schema:
            _refs(value, into)


def _closure(name: str, definitions: dict[str, Any]) -> dict[str, Any]:
    """The definitions that ``name`` refers to, directly or not (itself included)."""
    seen: set[str] = set()
    todo = [name]
    while todo:
        current = todo.pop()
        if current in seen or current not in definitions:
            continue
        seen.add(current)
        found: set[str] = set()
        _refs(definitions[current], found)
        todo.extend(found - seen)
    return {n: definitions[n] for n in sorted(seen)}


def kubernetes(swagger: Path, out: Path) -> int:
    definitions = json.loads(swagger.read_text())["definitions"]
    definitions = {n: _NUMERIC_STRINGS.get(n) or strict(d) for n, d in definitions.items()}
    written = 0
    for name, definition in definitions.items():
        for gvk in definition.get("x-kubernetes-group-version-kind", []):
            kind, group, version = gvk["kind"].lower(), gvk["group"], gvk["version"]
            suffix = f"-{group.split('.')[0]}-{version}" if group else f"-{version}"
            schema = {**definition, "definitions": _closure(name, definitions)}
            (out / f"{kind}{suffix}.json").write_text(json.dumps(schema))
            written += 1
    return written


class _Loader(yaml.SafeLoader):
    """YAML 1.1 reads a bare ``=`` as the 'value' type, which the CRDs use as a plain string."""


_Loader.add_constructor("tag:yaml.org,2002:value", lambda loader, node: loader.construct_scalar(node))


def crds(directory: Path, out: Path) -> int:
    written = 0
    for path in sorted(directory.glob("*.yaml")):
        crd = yaml.load(path.read_text(), Loader=_Loader)
        spec = crd["spec"]
        group, kind = spec["group"], spec["names"]["kind"].lower()
        (out / group).mkdir(parents=True, exist_ok=True)
        for version in spec["versions"]:
            schema = strict(version["schema"]["openAPIV3Schema"])
            (out / group / f"{kind}_{version['name']}.json").write_text(json.dumps(schema))
            written += 1
    return written


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        sys.stderr.write(__doc__ or "")
        return 2
    swagger, crd_dir, out = map(Path, argv)
    out.mkdir(parents=True, exist_ok=True)
    n = kubernetes(swagger, out)
    m = crds(crd_dir, out)
    print(f"{n} Kubernetes schemas and {m} CRD schemas in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
