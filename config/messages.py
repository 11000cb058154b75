"""Validation problems in the words of the configuration file, not of pydantic.

pydantic's own messages ("Input should be greater than 0", "Extra inputs are not permitted") speak of
Python inputs; a person editing TOML needs the key, the rule and what to write. Each pydantic error
type a user can meet is worded here once, so `run` and `check-config` say the same thing. An
unknown key gets "did you mean ..." from the keys its table allows (a typo is the usual cause).
Messages never show the value pydantic was given: it may be a secret.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from mqbridge.config.listener import ListenerConfig
from mqbridge.config.schema import BridgeConfig, TypeConfig
from mqbridge.config.sources import MemorySourceConfig, MqSourceConfig, StompSourceConfig
from mqbridge.errors import KeyedError, Loc

Problem = tuple[Loc, str]

_SOURCE_MODELS: dict[str, type[BaseModel]] = {
    "stomp": StompSourceConfig, "mq": MqSourceConfig, "memory": MemorySourceConfig}
_SOURCE_KINDS = "stomp, mq or memory"

#: pydantic error type -> our wording; `{name}` fields come from the error's context.
_WORDING = {
    "greater_than": "must be more than {gt}",
    "greater_than_equal": "must be {ge} or more",
    "less_than": "must be less than {lt}",
    "less_than_equal": "must be {le} or less",
    "string_too_long": "must be at most {max_length} characters",
    "too_short": "needs at least {min_length} entry",
    "literal_error": "must be {expected}",
    "int_parsing": "must be a whole number",
    "int_type": "must be a whole number",
    "int_from_float": "must be a whole number",
    "bool_parsing": "must be true or false",
    "bool_type": "must be true or false",
    "float_parsing": "must be a number",
    "float_type": "must be a number",
    "string_type": 'must be a string (in quotes, e.g. "text")',
    "dict_type": "must be a table",
    "model_type": "must be a table",
    "model_attributes_type": "must be a table",
    "list_type": "must be a list [...]",
    "path_type": 'must be a path (a string, e.g. "data/landing")',
    "string_pattern_mismatch": "must match the pattern {pattern}",
    "missing": "required key is missing",
}


def problems_of(exc: ValidationError, raw: Mapping[str, Any] | None) -> list[Problem]:
    """Each pydantic error of validating `raw` as (key path, message), without the input values.
    `raw` None: not a whole configuration (a preprocessor's options): no "did you mean"."""
    problems: list[Problem] = []
    for error in exc.errors(include_url=False, include_input=False):
        loc: Loc = tuple(error["loc"])
        if len(loc) >= 3 and loc[0] == "sources" and loc[2] in _SOURCE_MODELS:
            loc = loc[:2] + loc[3:]  # the discriminated union adds the kind to the location
        kind, ctx = error["type"], error.get("ctx") or {}
        cause = ctx.get("error")
        if isinstance(cause, KeyedError):
            problems.extend(((*loc, *sub), msg) for sub, msg in cause.problems)
        elif kind == "value_error" and cause is not None:
            problems.append((loc, str(cause)))
        elif kind == "extra_forbidden":
            problems.append((loc, "unknown key" + (did_you_mean(loc, raw) if raw is not None else "")))
        elif kind == "union_tag_not_found":
            problems.append(((*loc, "kind"), f"required key is missing ({_SOURCE_KINDS})"))
        elif kind == "union_tag_invalid":
            problems.append(((*loc, "kind"), f"{ctx.get('tag')!r} is not a source kind ({_SOURCE_KINDS})"))
        else:
            problems.append((loc, _worded(kind, ctx, error["msg"])))
    return problems


def _worded(kind: str, ctx: Mapping[str, Any], fallback: str) -> str:
    if kind == "string_too_short":
        return "must not be empty" if ctx.get("min_length") == 1 else f"must be at least {ctx['min_length']} characters"
    template = _WORDING.get(kind)
    if template is None:
        # Not met in practice; pydantic's "Input should be ..." still reads as a rule.
        return fallback.replace("Input should be", "must be")
    # A bound of a duration (a float) reads as the user wrote it: "more than 0", not "0.0".
    shown = {k: int(v) if isinstance(v, float) and v.is_integer() else v for k, v in ctx.items()}
    try:
        return template.format(**shown)
    except (KeyError, IndexError):
        return fallback


def allowed_keys(table: Loc, raw: Mapping[str, Any]) -> list[str]:
    """The keys the table at `table` (a key path) accepts, as written in TOML; [] if unknown."""
    model: type[BaseModel] | None = None
    if not table:
        model = BridgeConfig
    elif len(table) == 1 and isinstance(table[0], str):
        field = BridgeConfig.model_fields.get(table[0])
        annotation = field.annotation if field is not None else None
        model = annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None
    elif len(table) == 2 and table[0] == "types":
        model = TypeConfig
    elif len(table) == 2 and table[0] == "listeners":
        model = ListenerConfig
    elif len(table) == 2 and table[0] == "sources":
        source = (raw.get("sources") or {}).get(table[1]) if isinstance(raw.get("sources"), dict) else None
        kind = source.get("kind") if isinstance(source, dict) else None
        if kind not in _SOURCE_MODELS:  # no kind (yet): any source key may be meant
            return sorted({name for m in _SOURCE_MODELS.values() for name in _names(m)})
        model = _SOURCE_MODELS[kind]
    return _names(model) if model is not None else []


def did_you_mean(loc: Loc, raw: Mapping[str, Any]) -> str:
    """"; did you mean X?" for an unknown key at `loc` close to an allowed one, else the keys
    allowed there (when few enough to read), else ""."""
    if not loc or not isinstance(loc[-1], str):
        return ""
    allowed = allowed_keys(loc[:-1], raw)
    close = difflib.get_close_matches(loc[-1], allowed, n=1, cutoff=0.6)
    if close:
        return f" — did you mean {close[0]}?"
    if len(loc) == 3 and loc[0] == "sources":  # a key of another kind of source: the kind is what is wrong
        kinds = [kind for kind, model in _SOURCE_MODELS.items() if loc[2] in _names(model)]
        if kinds:
            return f" — a key of kind = {' or '.join(repr(k) for k in kinds)} sources"
    return f" (allowed here: {', '.join(allowed)})" if allowed and len(allowed) <= 12 else ""


def _names(model: type[BaseModel]) -> list[str]:
    return [field.alias or name for name, field in model.model_fields.items()]
