"""Tool input schemas derived from the REST wire Structs, and the strict check of a tool call's arguments.

A tool's arguments are the fields of the Structs its REST operations read (wire/), so an argument means
what the REST parameter of the same name means, with the same limits. Each argument keeps two schemas, both
derived from the Struct's JSON schema:

* the *full* one (every constraint: patterns, lengths, nested objects) checks the call;
* the *published* one (`compact`: no titles, no null alternatives, no empty defaults, no patterns, no
  lengths) goes out in tools/list, where every character is paid for by the model's context on every turn.

`check` refuses an unknown argument, a wrong type or a value out of range with one line naming the argument
and what it accepts (a `ToolError`, so the SDK answers an `isError` result), before anything is sent.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import jsonschema
import msgspec

Schema = dict[str, Any]
PUBLISHED_MAXIMUM = 86_400  # larger bounds are checked but not published (no one reaches them by mistake)
KEEP_IN_PUBLISHED = frozenset(
    {"type", "enum", "minimum", "maximum", "default", "description", "items", "properties", "required",
     "additionalProperties", "minItems"}
)  # fmt: skip


class ArgumentError(Exception):
    """A tool call's arguments do not fit the tool: `field` is the argument at fault (JSON path without `$.`)."""

    def __init__(self, detail: str, field: str) -> None:
        super().__init__(detail)
        self.detail = detail
        self.field = field


def struct_arguments(struct: type[msgspec.Struct]) -> tuple[dict[str, Schema], list[str]]:
    """The full JSON schema of each field of `struct` (references inlined), and the required field names."""
    document = msgspec.json.schema(struct)
    defs = document.get("$defs", {})
    body = _inline(document, defs)
    return dict(body["properties"]), list(body.get("required", []))


def _inline(schema: Any, defs: Mapping[str, Any]) -> Any:
    if isinstance(schema, dict):
        if "$ref" in schema:
            return _inline(defs[schema["$ref"].rsplit("/", 1)[-1]], defs)
        return {k: _inline(v, defs) for k, v in schema.items()}
    if isinstance(schema, list):
        return [_inline(v, defs) for v in schema]
    return schema


def without_null(schema: Schema) -> Schema:
    """`anyOf: [X, null]` (an optional field) as X, keeping the outer keywords (null means "not given")."""
    alternatives = schema.get("anyOf")
    if not alternatives:
        return schema
    rest = [a for a in alternatives if a != {"type": "null"}]
    if len(rest) != 1:
        return schema
    outer = {k: v for k, v in schema.items() if k not in ("anyOf", "default")}
    if schema.get("default") is not None:
        outer["default"] = schema["default"]
    return {**rest[0], **outer}


def compact(schema: Any, *, nested: bool = False) -> Any:
    """The published form of an argument's schema: what a model needs to call it right, in few characters."""
    if not isinstance(schema, dict):
        return schema
    schema = without_null(schema)
    out: Schema = {}
    for key, value in schema.items():
        if key not in KEEP_IN_PUBLISHED:
            continue
        if key == "default" and value in (None, [], {}, False, ""):
            continue
        if key == "maximum" and value > PUBLISHED_MAXIMUM:
            continue
        if key == "description" and nested:
            continue  # an item's or a nested Struct's: the argument's own description says it
        if isinstance(value, float) and value.is_integer():
            value = int(value)  # 0 rather than 0.0: the same number in fewer characters
        if key == "required" and not value:
            continue
        if key == "properties":
            value = {name: compact(prop, nested=True) for name, prop in value.items()}
        elif key == "items":
            value = compact(value, nested=True)
        out[key] = value
    return out


@dataclass(frozen=True)
class Action:
    """One value of a multi-action tool's `action` argument: the arguments it takes and those it needs."""

    takes: frozenset[str]
    needs: frozenset[str] = frozenset()


@dataclass
class ArgumentSpec:
    """A tool's arguments: their full schemas (for the check) and the published object schema."""

    properties: dict[str, Schema]
    required: list[str] = field(default_factory=list)
    actions: Mapping[str, Action] | None = None
    shown: Mapping[str, Schema] = field(default_factory=dict)  # published instead of the compact full schema
    notes: Mapping[str, str] = field(default_factory=dict)  # the published descriptions (only these are)
    stated_defaults: frozenset[str] = frozenset({"action"})  # string defaults published (others are not)

    def __post_init__(self) -> None:
        self.full: Schema = {
            "type": "object",
            "properties": {name: _no_nulls(prop) for name, prop in self.properties.items()},
            "required": self.required,
            "additionalProperties": False,
        }
        self._validator = jsonschema.Draft202012Validator(self.full)

    def published(self) -> Schema:
        """The inputSchema of tools/list."""
        schema: Schema = {
            "type": "object",
            "properties": {name: self._published(name, prop) for name, prop in self.properties.items()},
        }
        if self.required:
            schema["required"] = self.required
        schema["additionalProperties"] = False
        return schema

    def _published(self, name: str, prop: Schema) -> Schema:
        if name in self.shown:
            return dict(self.shown[name])
        schema = {k: v for k, v in compact(prop).items() if k != "description"}
        if isinstance(schema.get("default"), str) and name not in self.stated_defaults:
            del schema["default"]  # the neutral choice of an enum (both, newest, json...) goes without saying
        if name in self.notes:
            schema["description"] = self.notes[name]
        return schema

    def check(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The arguments given (a null is an argument not given), or ArgumentError naming the first one at fault."""
        given = {k: v for k, v in arguments.items() if v is not None}
        unknown = sorted(set(given) - set(self.properties))
        if unknown:
            raise ArgumentError(f"unknown argument; this tool takes {', '.join(self.properties)}", unknown[0])
        error = jsonschema.exceptions.best_match(self._validator.iter_errors(given))
        if error is not None:
            raise _explain(error)
        if self.actions is not None:
            self._check_action(given)
        return given

    def _check_action(self, given: Mapping[str, Any]) -> None:
        assert self.actions is not None
        name = given["action"] if "action" in given else self.properties["action"]["default"]
        action = self.actions[name]
        for arg in given:
            if arg != "action" and arg not in action.takes:
                takes = ", ".join(sorted(action.takes)) or "no other argument"
                raise ArgumentError(f"not an argument of action {name} (it takes {takes})", arg)
        for arg in sorted(action.needs - set(given)):
            raise ArgumentError(f"action {name} needs it", arg)


def _no_nulls(schema: Any) -> Any:
    """A schema whose optional values are checked as their type (a null argument was dropped before)."""
    if isinstance(schema, dict):
        return {k: _no_nulls(v) for k, v in without_null(schema).items()}
    if isinstance(schema, list):
        return [_no_nulls(v) for v in schema]
    return schema


def arguments(
    *structs: type[msgspec.Struct],
    rename: Mapping[str, str] | None = None,
    skip: Iterable[str] = (),
    extra: Mapping[str, Schema] | None = None,
    describe: Mapping[str, str] | None = None,
    defaults: Mapping[str, Any] | None = None,
    required: Iterable[str] | None = None,
    actions: Mapping[str, Action] | None = None,
    shown: Mapping[str, Schema] | None = None,
    tighten: Mapping[str, Schema] | None = None,
) -> ArgumentSpec:
    """A tool's arguments: the fields of `structs` (the first Struct naming a field wins), `rename`d
    (field -> argument), without `skip`, plus `extra` ones. `describe` gives the published description of an
    argument (no other is published: the names say the rest) and `defaults` its default. Required: `required`
    when given, else the Structs' required fields without a default here. `shown` publishes a short schema
    for a large nested argument (its full one still checks); `tighten` adds keywords to an argument's schema."""
    rename, defaults, describe = rename or {}, defaults or {}, describe or {}
    properties: dict[str, Schema] = {}
    needed: list[str] = []
    for struct in structs:
        fields, struct_required = struct_arguments(struct)
        for name, prop in fields.items():
            arg = rename.get(name, name)
            if name in skip or arg in properties:
                continue
            properties[arg] = prop
            if name in struct_required and arg not in defaults:
                needed.append(arg)
    properties.update(extra or {})
    for arg in describe:
        assert arg in properties, arg
    for arg, keywords in (tighten or {}).items():
        properties[arg] = {**properties[arg], **keywords}
    for arg, value in defaults.items():
        properties[arg] = {**properties[arg], "default": value}
    needed = list(required) if required is not None else needed
    stated = frozenset({"action", *(arg for arg, value in defaults.items() if isinstance(value, str))})
    return ArgumentSpec(properties, needed, actions, dict(shown or {}), dict(describe), stated)


def action_argument(actions: Mapping[str, Action], default: str | None = None) -> Schema:
    """The `action` argument of a multi-action tool (list it in `required` when it has no default)."""
    schema: Schema = {"enum": list(actions)}
    if default is not None:
        schema["default"] = default
    return schema


def described_object(struct: type[msgspec.Struct], what: str, *, array: bool = False) -> Schema:
    """A short published schema for a nested Struct argument: its field names in words."""
    fields = ", ".join(struct.__struct_fields__)
    schema: Schema = {"type": "object", "description": f"{what}: {fields}"}
    if array:
        return {"type": "array", "items": {"type": "object"}, "description": schema["description"]}
    return schema


def path_of(parts: Iterable[Any]) -> str:
    """A JSON path without `$`: `links[0].target`."""
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "null"


def accepts(schema: Schema) -> str:
    """What a schema accepts, in a few words."""
    schema = without_null(schema)
    if "enum" in schema:
        return "one of " + ", ".join(str(v) for v in schema["enum"])
    kind = schema.get("type", "a value")
    if kind in ("integer", "number"):
        low, high = schema.get("minimum"), schema.get("maximum")
        if low is not None and high is not None:
            return f"{'an integer' if kind == 'integer' else 'a number'} from {low} to {high}"
        article = "an integer" if kind == "integer" else "a number"
        return f"{article} of at least {low}" if low is not None else article
    if kind == "array":
        low, high = schema.get("minItems"), schema.get("maxItems")
        if low and high is not None:
            size = f" of {low} to {high} items"
        elif high is not None:
            size = f" of at most {high} items"
        else:
            size = f" of at least {low} items" if low else ""
        items = schema.get("items")
        return f"a list{size}" + (f", each {accepts(items)}" if items else "")
    if kind == "string":
        what = schema.get("description") or "a string"
        limit = f" of at most {schema['maxLength']} characters" if "maxLength" in schema else ""
        return what + limit
    return {"object": "an object", "boolean": "true or false"}.get(kind, f"a {kind}")


def _explain(error: jsonschema.ValidationError) -> ArgumentError:
    """One line for a JSON-schema error: the argument at fault and what it accepts."""
    where = path_of(error.absolute_path)
    schema = error.schema if isinstance(error.schema, dict) else {}
    value = error.instance
    kind = error.validator
    if kind == "required":
        missing = next(name for name in error.validator_value if name not in value)
        wanted = schema.get("properties", {}).get(missing, {})
        return ArgumentError(f"required; accepts {accepts(wanted)}", path_of([*error.absolute_path, missing]))
    if kind == "additionalProperties":
        extra = sorted(set(value) - set(schema.get("properties", {})))
        known = ", ".join(schema.get("properties", {}))
        return ArgumentError(f"unknown field; it takes {known}", path_of([*error.absolute_path, extra[0]]))
    if kind == "type":
        return ArgumentError(f"got {_json_type(value)}; accepts {accepts(schema)}", where)
    if kind == "enum":
        return ArgumentError(f"{value!r} is not {accepts(schema)}", where)
    if kind in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        return ArgumentError(f"{value} is out of range; accepts {accepts(schema)}", where)
    if kind in ("minItems", "maxItems"):
        return ArgumentError(f"{len(value)} items; accepts {accepts(schema)}", where)
    if kind in ("minLength", "maxLength"):
        low, high = schema.get("minLength", 0), schema.get("maxLength")
        span = f"at least {low}" if high is None else f"{low} to {high}"
        return ArgumentError(f"{len(value)} characters; accepts {span} characters", where)
    if kind == "pattern":
        what = schema.get("description") or f"a string matching {schema['pattern']}"
        return ArgumentError(f"{str(value)[:40]!r} is not {what}", where)
    return ArgumentError(error.message.splitlines()[0][:200], where)
