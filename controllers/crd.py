"""Custom resources from pydantic models: one definition, two uses.

A kind's spec and status are pydantic models (`controllers.v1alpha1`). From them come

- the CustomResourceDefinition (`Kind.crd()`, written to crds/ by tools/gen_crds.py): the
  models' JSON schema made structural (no $ref, no anyOf-null, no titles), with the defaults,
  enumerations, ranges and patterns of the fields, the CEL rules (`Rule`, attached to a model
  with `__rules__` or to a field with `extensions(...)`), list types and printer columns;
- the operator's validation of an object (`validate`), which checks what the API server checks,
  in the same order: the structural schema (pydantic, strict: a string is not a number), then —
  unless a value has the wrong type or is not in its enum, which blocks them as it does on the
  API server — the
  defaults, the list-type uniqueness and the CEL rules of that same schema, evaluated by a CEL
  interpreter (PyPI common-expression-language: the Rust `cel` crate). A rule is written once,
  in CEL; the operator reports its message for the path the API server would name
  (`spec.fields[1] (vec): a dense vector field needs dim`). Transition rules (`oldSelf`:
  immutability) are the API server's alone: the operator compares a spec with the live
  collection instead.

So an object that got past the API server anyway (no CEL support, an old CRD, a direct etcd
write) is reported in its conditions with the messages a user would have seen from kubectl.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar

import cel
from pydantic import BaseModel, ConfigDict, PlainValidator, ValidationError, WithJsonSchema, field_validator
from pydantic_core import PydanticCustomError

GROUP = "kmilvus.io"
VERSION = "v1alpha1"
NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
PATTERN_HELP = {
    NAME_PATTERN: "is not a valid Milvus name: 1-255 characters, a letter or underscore first, then "
    "letters, digits and underscores"
}
# JSON schema types in plain words (messages say "must be an integer, got '2'").
_TYPE_WORDS = {"string": "a string", "integer": "an integer", "boolean": "a boolean", "array": "a list"}
_TYPE_WORDS |= {"object": "an object", "number": "a number"}
# pydantic error types that mean "wrong JSON type".
_TYPE_ERRORS = {"null", "int_type", "string_type", "bool_type", "list_type", "dict_type", "float_type"}
_TYPE_ERRORS |= {"model_type", "model_attributes_type", "int_or_string"}
# Errors after which the API server runs no CEL rule (a wrong type, or a value not in an enum:
# "some validation rules were not checked because the object was invalid"): the operator neither.
_BLOCKING = _TYPE_ERRORS | {"enum", "literal_error"}


@dataclass(frozen=True)
class Rule:
    """A CEL rule (x-kubernetes-validations). `field_path` is where the API server (and the
    operator) report it, relative to the object the rule is on (".indexes")."""

    rule: str
    message: str
    message_expression: str | None = None
    field_path: str | None = None

    def schema(self) -> dict[str, str]:
        out = {"rule": self.rule, "message": self.message}
        if self.message_expression:
            out["messageExpression"] = self.message_expression
        if self.field_path:
            out["fieldPath"] = self.field_path
        return out

    @property
    def transition(self) -> bool:
        """A rule comparing with the previous object: the API server's alone."""
        return "oldSelf" in self.rule


def immutable(message: str) -> Rule:
    return Rule("self == oldSelf", message)


def extensions(*rules: Rule, **extra: Any) -> dict[str, Any]:
    """A field's `json_schema_extra`: its CEL rules and Kubernetes extensions, e.g.
    `extensions(immutable("..."), list_type="set")` (x-kubernetes-list-type: set)."""
    out: dict[str, Any] = {f"x-kubernetes-{k.replace('_', '-')}": v for k, v in extra.items()}
    if rules:
        out["x-kubernetes-validations"] = [r.schema() for r in rules]
    return out


def _int_or_string(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise PydanticCustomError("int_or_string", "must be an integer or a string")
    return value


# An integer or a string (x-kubernetes-int-or-string): one check, one message.
IntOrString = Annotated[int | str, PlainValidator(_int_or_string), WithJsonSchema({"x-kubernetes-int-or-string": True})]
# Any JSON value (x-kubernetes-preserve-unknown-fields).
AnyJSON = Annotated[Any, WithJsonSchema({"x-kubernetes-preserve-unknown-fields": True})]
# An object whose content the API server keeps as it is (kopf's bookkeeping in the status).
OpenObject = Annotated[dict[str, Any], WithJsonSchema({"type": "object", "x-kubernetes-preserve-unknown-fields": True})]


class Model(BaseModel):
    """A part of a custom resource: camelCase JSON (`alias`), strict JSON types (a string is not a
    number, a number not a boolean), unknown keys ignored (the API server prunes them)."""

    model_config = ConfigDict(strict=True, populate_by_name=True, extra="ignore")
    __rules__: ClassVar[tuple[Rule, ...]] = ()

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: Any, handler: Any) -> dict[str, Any]:
        schema: dict[str, Any] = handler(core_schema)
        target = handler.resolve_ref_schema(schema)
        target.pop("title", None)
        if cls.__doc__ and cls.__doc__ is not Model.__doc__:
            target["description"] = " ".join(cls.__doc__.split())
        if cls.__dict__.get("__rules__"):
            target["x-kubernetes-validations"] = [r.schema() for r in cls.__rules__]
        return schema

    @field_validator("*", mode="before")
    @classmethod
    def _not_null(cls, value: Any) -> Any:
        """A null is a wrong type (the API server would have pruned it; a client that sent one
        meant something else)."""
        if value is None:
            raise PydanticCustomError("null", "must not be null")
        return value


# ------------------------------------------------------------------------------ the definition
@dataclass(frozen=True)
class Column:
    """An additionalPrinterColumn (`kubectl get`)."""

    name: str
    type: str
    json_path: str
    priority: int = 0

    def schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "type": self.type}
        if self.priority:
            out["priority"] = self.priority
        out["jsonPath"] = self.json_path
        return out


@dataclass(frozen=True)
class Kind:
    """A kind of kmilvus.io/v1alpha1: its names, models, printer columns."""

    kind: str
    plural: str
    short_names: tuple[str, ...]
    spec: type[Model]
    status: type[Model]
    description: str
    columns: tuple[Column, ...] = ()
    comment: str = ""  # the header comment of its YAML file
    categories: tuple[str, ...] = ("kmilvus",)
    required_spec: bool = True

    @property
    def name(self) -> str:
        return f"{self.plural}.{GROUP}"

    def openapi(self) -> dict[str, Any]:
        """The openAPIV3Schema: a structural schema of the whole object."""
        props = {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": structural(self.spec),
            "status": structural(self.status),
        }
        root: dict[str, Any] = {"type": "object", "description": " ".join(self.description.split())}
        if self.required_spec:
            root["required"] = ["spec"]
        root["properties"] = props
        return root

    def crd(self) -> dict[str, Any]:
        version = {
            "name": VERSION,
            "served": True,
            "storage": True,
            "subresources": {"status": {}},
            "additionalPrinterColumns": [c.schema() for c in self.columns],
            "schema": {"openAPIV3Schema": self.openapi()},
        }
        return {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {
                "name": self.name,
                "labels": {"app.kubernetes.io/name": "kmilvus", "app.kubernetes.io/component": "crd"},
            },
            "spec": {
                "group": GROUP,
                "scope": "Namespaced",
                "names": {
                    "kind": self.kind,
                    "listKind": f"{self.kind}List",
                    "plural": self.plural,
                    "singular": self.kind.lower(),
                    "shortNames": list(self.short_names),
                    "categories": list(self.categories),
                },
                "versions": [version],
            },
        }


# Keys in the order a reader expects them in the YAML.
_ORDER = [
    "type",
    "format",
    "description",
    "required",
    "default",
    "enum",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "maxProperties",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-int-or-string",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-validations",
    "properties",
    "additionalProperties",
    "items",
]


@functools.cache
def _structural(model: type[Model]) -> dict[str, Any]:
    schema = model.model_json_schema(by_alias=True, mode="validation")
    defs = schema.pop("$defs", {})

    def conv(node: Any) -> Any:
        if not isinstance(node, dict):
            return node
        node = dict(node)
        if "$ref" in node:
            target = defs[node.pop("$ref").rsplit("/", 1)[-1]]
            node = {**target, **node}
        if "anyOf" in node:  # X | None: the API server has no null (an absent field is "unset")
            branches = [b for b in node.pop("anyOf") if b != {"type": "null"}]
            (branch,) = branches
            node = {**conv(branch), **node}
        node.pop("title", None)
        if node.get("default", 0) is None:
            node.pop("default")
        if "const" in node:
            node["enum"] = [node.pop("const")]
        out: dict[str, Any] = {}
        for key in sorted(node, key=lambda k: _ORDER.index(k) if k in _ORDER else len(_ORDER)):
            value = node[key]
            if key == "properties":
                value = {k: conv(v) for k, v in value.items()}
            elif key in ("items", "additionalProperties"):
                value = conv(value)
            out[key] = value
        return out

    out: dict[str, Any] = conv(schema)
    return out


def structural(model: type[Model]) -> dict[str, Any]:
    """The structural OpenAPI v3 schema of `model` (a fresh copy)."""
    import copy

    return copy.deepcopy(_structural(model))


# ------------------------------------------------------------------------------ validation
def short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _path(where: str, loc: tuple[Any, ...]) -> str:
    return where + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc)


def _node_at(schema: dict[str, Any], loc: tuple[Any, ...]) -> dict[str, Any]:
    node = schema
    for p in loc:
        if isinstance(p, int):
            node = node.get("items") or {}
        else:
            props = node.get("properties") or {}
            node = props.get(p) or (node.get("additionalProperties") if isinstance(node, dict) else None) or {}
            if not isinstance(node, dict):
                node = {}
    return node


def _range(node: dict[str, Any]) -> str:
    lo, hi = node.get("minimum"), node.get("maximum")
    if lo is not None and hi is not None:
        return f"in [{lo}, {hi}]"
    return f">= {lo}" if lo is not None else f"<= {hi}"


def _message(err: Mapping[str, Any], node: dict[str, Any]) -> str:
    """A pydantic error in the words of the CRD's schema (the node the error is at)."""
    kind: str = err["type"]
    value: Any = err.get("input")
    if kind in _TYPE_ERRORS:
        if kind == "int_or_string":
            return f"must be an integer or a string, got {short(value)}"
        want = _TYPE_WORDS.get(node.get("type", ""), "an object" if "properties" in node else "a value")
        return f"must be {want}, got {short(value)}"
    if kind == "missing":
        return "is required"
    if kind in ("literal_error", "enum"):
        return f"must be one of {', '.join(map(str, node.get('enum', [])))}, got {short(value)}"
    if kind in ("less_than_equal", "greater_than_equal", "less_than", "greater_than"):
        return f"must be {_range(node)}, got {short(value)}"
    if kind == "string_pattern_mismatch":
        return f"{short(value)} " + PATTERN_HELP.get(node.get("pattern", ""), f"does not match {node.get('pattern')}")
    if kind == "string_too_short":
        return "must not be empty"
    if kind == "string_too_long":
        return f"has {len(value)} characters; at most {node.get('maxLength')}"
    if kind == "too_short":
        return f"must list at least {node.get('minItems', 1)}"
    if kind == "too_long":
        most = node.get("maxItems", node.get("maxProperties"))
        return f"has {len(value) if hasattr(value, '__len__') else '?'} entries; at most {most} are allowed"
    msg = str(err.get("msg", ""))
    return msg.removeprefix("Value error, ")


@dataclass
class Checked:
    """`validate`'s answer: the typed object (None when there are problems) and the problems,
    each `path: message` (or `path message`), with the path the API server would report."""

    model: Any = None
    problems: list[str] = field(default_factory=list)


def validate(model: type[Model], data: Any, where: str = "spec") -> Checked:
    """Check `data` as the API server checks the object's `where` part against the CRD that
    `model` generates: structure and types, then (no type error) defaults, list-type
    uniqueness and CEL rules."""
    schema = _structural(model)
    if not isinstance(data, dict):
        return Checked(problems=[f"{where} must be an object, got {short(data)}"])
    problems: list[str] = []
    blocked = False
    try:
        obj = model.model_validate(data)
    except ValidationError as exc:
        obj = None
        for err in exc.errors(include_url=False):
            loc = tuple(err["loc"])
            if err["type"] in _BLOCKING:
                blocked = True
            problems.append(_problem(where, loc, data, _message(err, _node_at(schema, loc))))
    if not blocked:
        problems += [p for p in _rules(schema, with_defaults(schema, data), where) if p not in problems]
    return Checked(obj if not problems else None, problems)


def _problem(where: str, loc: tuple[Any, ...], data: Any, message: str) -> str:
    path = _path(where, loc)
    label = _item_label(data, loc)
    if message.startswith(("must", "is ", "has ", "'", '"')):
        return f"{path}{label} {message}"
    return f"{path}{label}: {message}"


def _item_label(data: Any, loc: tuple[Any, ...]) -> str:
    """` (vec)` after `spec.fields[1]`: the name of the list item a problem is in, if it has one."""
    node, label = data, ""
    for p in loc:
        try:
            node = node[p]
        except (KeyError, IndexError, TypeError):
            return label
        if isinstance(p, int) and isinstance(node, dict) and isinstance(node.get("name"), str):
            label = f" ({short(node['name'], 40)[1:-1]})"
    return label if loc and isinstance(loc[-1], int) else ""


def with_defaults(schema: dict[str, Any], data: Any) -> Any:
    """`data` with the schema's defaults filled in, as the API server stores an object."""
    if isinstance(data, dict) and "properties" in schema:
        out = dict(data)
        for key, sub in schema["properties"].items():
            if key not in out and "default" in sub:
                out[key] = sub["default"]
            if key in out:
                out[key] = with_defaults(sub, out[key])
        return out
    if isinstance(data, list) and isinstance(schema.get("items"), dict):
        return [with_defaults(schema["items"], v) for v in data]
    return data


def _walk(schema: dict[str, Any], data: Any, path: str) -> Iterator[tuple[dict[str, Any], Any, str]]:
    yield schema, data, path
    if isinstance(data, dict):
        for key, sub in (schema.get("properties") or {}).items():
            if key in data:
                yield from _walk(sub, data[key], f"{path}.{key}")
    elif isinstance(data, list) and isinstance(schema.get("items"), dict):
        for i, v in enumerate(data):
            label = f" ({short(v['name'], 40)[1:-1]})" if isinstance(v, dict) and isinstance(v.get("name"), str) else ""
            yield from _walk(schema["items"], v, f"{path}[{i}]{label}")


def _rules(schema: dict[str, Any], data: Any, where: str) -> list[str]:
    problems = []
    for node, value, path in _walk(schema, data, where):
        problems += _list_type_problems(node, value, path)
        problems += _int64_problems(node, value, path)
        for r in node.get("x-kubernetes-validations") or []:
            if "oldSelf" in r["rule"] or _evaluate(r["rule"], value) is not False:
                continue
            message = r["message"]
            if r.get("messageExpression"):
                text = _evaluate(r["messageExpression"], value)
                message = text if isinstance(text, str) and text else message
            at = path + (r.get("fieldPath") or "")
            problems.append(f"{at}: {' '.join(message.split())}")
    return problems


def _int64_problems(node: dict[str, Any], value: Any, path: str) -> list[str]:
    """An integer of a Kubernetes object is an int64: the API server refuses a larger one as it
    decodes the body, before any rule."""
    if node.get("type") != "integer" or isinstance(value, bool) or not isinstance(value, int):
        return []
    if -(2**63) <= value < 2**63:
        return []
    return [f"{path}: {short(value)} does not fit an int64 integer"]


def _list_type_problems(node: dict[str, Any], value: Any, path: str) -> list[str]:
    """x-kubernetes-list-type set / map: no duplicates (the API server's "Duplicate value")."""
    kind = node.get("x-kubernetes-list-type")
    if not isinstance(value, list) or kind not in ("set", "map"):
        return []
    keys = node.get("x-kubernetes-list-map-keys") or []
    seen: list[Any] = []
    dups: list[str] = []
    for v in value:
        key = tuple(v.get(k) for k in keys) if kind == "map" and isinstance(v, dict) else v
        if key in seen and short(key) not in dups:
            dups.append(short(key[0] if kind == "map" and len(keys) == 1 else key))
        seen.append(key)
    if not dups:
        return []
    what = f"{', '.join(keys)} " if kind == "map" else ""
    return [f"{path}: duplicate {what}value(s) {', '.join(dups)}"]


@functools.cache
def _program(expr: str) -> Any:
    return cel.compile(expr)


def _evaluate(expr: str, value: Any) -> Any:
    """A CEL expression on `self` = value: a Python bool / str, or None when it cannot be
    evaluated (a missing field, a wrong type: the structural schema reported that already)."""
    try:
        out = _program(expr).execute({"self": value})
    except (KeyError, TypeError, ValueError, RuntimeError, OverflowError):
        return None
    return out if isinstance(out, bool | str) else None


def valid_name(value: Any) -> bool:
    return isinstance(value, str) and bool(re.match(NAME_PATTERN, value)) and len(value) <= 255
