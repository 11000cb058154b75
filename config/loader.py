"""Reading a configuration: TOML text, then `${ENV:NAME}` / `${FILE:/path}` substitution, then the
models. Every problem becomes one `ConfigError` whose message is one line:
`<file>: <key.path>: <what is wrong>` (several problems joined with "; ").

Error messages never show the values pydantic was given: a value may be a secret.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from mqbridge.config.schema import BridgeConfig
from mqbridge.errors import ConfigError, KeyedError, Loc

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

#: Upper case only, so Spark's own `${env:NAME}` in a spark.conf value passes through untouched.
_REFERENCE = re.compile(r"\$\{(ENV|FILE):([^}]*)\}")
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_TOML_POSITION = re.compile(r"(.*?)\s*\(at line (\d+), column (\d+)\)$", re.DOTALL)
_AT_END = " (at end of document)"
_SHOWN = 3  # problems spelled out in one message; the others are counted
_SOURCE_KINDS = ("stomp", "mq")

Problem = tuple[Loc, str]


def load_config(path: str | os.PathLike[str]) -> BridgeConfig:
    """Read and validate the TOML configuration file at `path`. Raises ConfigError."""
    name = str(path)
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{name}: no such file") from None
    except OSError as exc:
        raise ConfigError(f"{name}: cannot read: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{name}: not UTF-8 text (byte {exc.start})") from None
    return parse_config(text, name)


def parse_config(text: str, path: str = "<string>", env: Mapping[str, str] | None = None) -> BridgeConfig:
    """Validate configuration TOML `text`. `path` names it in error messages; unless it is a
    pseudo-name in angle brackets ("<string>"), relative paths (and `${FILE:...}`) are taken from
    its directory, else from the current directory. `env` replaces os.environ for `${ENV:...}`."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: {_toml_error(exc, text)}") from None
    file = None if path.startswith("<") and path.endswith(">") else Path(path)
    base_dir = file.absolute().parent if file is not None else Path.cwd()
    problems: list[Problem] = []
    spark_section = raw.get("spark")
    original_conf = dict(spark_section.get("conf") or {}) if isinstance(spark_section, dict) else {}
    raw = _substitute(raw, (), os.environ if env is None else env, base_dir, problems)
    if problems:
        raise _config_error(path, problems)
    try:
        config = BridgeConfig.model_validate(raw)
    except ValidationError as exc:
        # `from None`: the ValidationError's own text shows input values, which may be secrets.
        raise _config_error(path, _problems(exc)) from None
    config._path = file
    config._base_dir = base_dir
    conf = (raw.get("spark") or {}).get("conf") if isinstance(raw.get("spark"), dict) else None
    config._referenced_conf = frozenset(
        key for key, value in (conf or {}).items() if _REFERENCE.search(str(original_conf.get(key, ""))))
    return config


def key_path(loc: Loc) -> str:
    """A pydantic location as a TOML key path: listeners[0].batch, spark.conf."a.b"."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            part = part if _BARE_KEY.fullmatch(part) else json.dumps(part, ensure_ascii=False)
            out += f".{part}" if out else part
    return out


def _toml_error(exc: tomllib.TOMLDecodeError, text: str) -> str:
    """`line L column C: <msg>` from tomllib's "<msg> (at line L, column C)" (or attributes)."""
    line, column = getattr(exc, "lineno", None), getattr(exc, "colno", None)
    msg = str(getattr(exc, "msg", "") or exc)
    if line is None:
        match = _TOML_POSITION.match(str(exc))
        if match:
            msg, line, column = match[1], int(match[2]), int(match[3])
        elif str(exc).endswith(_AT_END):
            msg, line = str(exc)[: -len(_AT_END)], text.count("\n") + 1
            column = len(text) - text.rfind("\n")
            msg += " (at end of document)"
    msg = " ".join(msg.split())
    return f"line {line} column {column}: {msg}" if line is not None else msg


def _substitute(value: Any, loc: Loc, env: Mapping[str, str], base_dir: Path,
                problems: list[Problem]) -> Any:
    """`value` with every `${ENV:...}`/`${FILE:...}` in its strings replaced, recursively."""
    if isinstance(value, dict):
        return {k: _substitute(v, (*loc, k), env, base_dir, problems) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(v, (*loc, i), env, base_dir, problems) for i, v in enumerate(value)]
    if not isinstance(value, str) or "${" not in value:
        return value

    def replace(match: re.Match[str]) -> str:
        kind, name = match[1], match[2].strip()
        if not name:
            problems.append((loc, f"${{{kind}:}} needs a name"))
        elif kind == "ENV":
            if name in env:
                return env[name]
            problems.append((loc, f"environment variable {name} is not set"))
        else:
            file = Path(name).expanduser()
            file = file if file.is_absolute() else base_dir / file
            try:
                content = file.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                why = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
                problems.append((loc, f"cannot read {file} (${{FILE:{name}}}): {why}"))
            else:
                return content[:-1] if content.endswith("\n") else content
        return ""

    return _REFERENCE.sub(replace, value)


def _problems(exc: ValidationError) -> list[Problem]:
    """Each pydantic error as (key path, message), without the input values."""
    problems: list[Problem] = []
    for error in exc.errors(include_url=False, include_input=False):
        loc: Loc = tuple(error["loc"])
        if len(loc) >= 3 and loc[0] == "sources" and loc[2] in _SOURCE_KINDS:
            loc = loc[:2] + loc[3:]  # the discriminated union adds the kind to the location
        kind, ctx = error["type"], error.get("ctx") or {}
        cause = ctx.get("error")
        if isinstance(cause, KeyedError):
            problems.extend(((*loc, *sub), msg) for sub, msg in cause.problems)
            continue
        if kind == "value_error" and cause is not None:
            msg = str(cause)
        elif kind == "extra_forbidden":
            msg = "unknown key"
        elif kind == "missing":
            msg = "required key is missing"
        elif kind == "union_tag_not_found":
            loc, msg = (*loc, "kind"), "required key is missing (stomp or mq)"
        elif kind == "union_tag_invalid":
            loc, msg = (*loc, "kind"), f"{ctx.get('tag')!r} is not a source kind (stomp or mq)"
        else:
            msg = error["msg"]
        problems.append((loc, msg))
    return problems


def _config_error(path: str, problems: list[Problem]) -> ConfigError:
    shown = [f"{key_path(loc)}: {msg}" if loc else msg for loc, msg in problems[:_SHOWN]]
    more = f" (+{len(problems) - _SHOWN} more)" if len(problems) > _SHOWN else ""
    return ConfigError(" ".join(f"{path}: {'; '.join(shown)}{more}".split()))
