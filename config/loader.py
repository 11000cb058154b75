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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from mqbridge.config.iceberg import bind as bind_iceberg_catalog
from mqbridge.config.messages import problems_of
from mqbridge.config.schema import BridgeConfig
from mqbridge.errors import ConfigError, Loc

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

Problem = tuple[Loc, str]


#: What an unresolved secret reference is replaced with when secrets are not needed (`secrets=False`):
#: long enough for a token, without spaces, so the rules of the value's key still pass.
UNRESOLVED = "unresolved-secret-reference"
#: The same for a reference that is the whole `[ledger] url`, which must look like a URL.
_UNRESOLVED_URL = "postgresql://unresolved@localhost/unresolved"


@dataclass
class Checked:
    """What reading a configuration text found: the configuration (None when it is invalid), every
    problem (key path, message), and the secret references left unresolved (key path, why)."""

    config: BridgeConfig | None
    problems: list[Problem]
    unresolved: list[Problem] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict)


def read_text(path: str | os.PathLike[str]) -> str:
    """The text of the configuration file at `path`. Raises ConfigError when it cannot be read."""
    name = str(path)
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{name}: no such file") from None
    except OSError as exc:
        raise ConfigError(f"{name}: cannot read: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{name}: not UTF-8 text (byte {exc.start})") from None


def load_config(path: str | os.PathLike[str], *, secrets: bool = True) -> BridgeConfig:
    """Read and validate the TOML configuration file at `path`. Raises ConfigError. With
    `secrets=False` (commands that need no secret) an unset `${ENV:...}` or unreadable
    `${FILE:...}` is no error: see `parse_config`."""
    return parse_config(read_text(path), str(path), secrets=secrets)


def parse_config(text: str, path: str = "<string>", env: Mapping[str, str] | None = None, *,
                 secrets: bool = True) -> BridgeConfig:
    """Validate configuration TOML `text`. `path` names it in error messages; unless it is a
    pseudo-name in angle brackets ("<string>"), relative paths (and `${FILE:...}`) are taken from
    its directory, else from the current directory. `env` replaces os.environ for `${ENV:...}`.

    With `secrets=False` a reference that cannot be resolved is replaced by `UNRESOLVED` and
    listed in `BridgeConfig.unresolved` instead of failing: `tables` or a SQLite `ledger` need no
    password, and an operator's shell rarely has the service's environment."""
    checked = check_text(text, path, env, secrets=secrets)
    if checked.config is None:
        # No problem of its own: only keys whose references were left unresolved failed.
        raise _config_error(path, checked.problems or checked.unresolved) from None
    return checked.config


def check_text(text: str, path: str = "<string>", env: Mapping[str, str] | None = None, *,
               secrets: bool = True) -> Checked:
    """Every problem of configuration TOML `text` (see `parse_config`), collected rather than
    raised: `check-config` reports them all. Raises ConfigError only when `text` is not TOML.
    With `secrets=True` unresolved references are problems and stop validation (as `run` does)."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: {_toml_error(exc, text)}") from None
    file = None if path.startswith("<") and path.endswith(">") else Path(path)
    base_dir = file.absolute().parent if file is not None else Path.cwd()
    problems: list[Problem] = []
    spark_section = raw.get("spark")
    original_conf = dict(spark_section.get("conf") or {}) if isinstance(spark_section, dict) else {}
    resolved = _substitute(raw, (), os.environ if env is None else env, base_dir, problems)
    unresolved = list(problems)
    if problems and secrets:
        return Checked(None, problems, unresolved, raw)
    resolved = _placeholders(resolved, [loc for loc, _ in unresolved])
    try:
        config = BridgeConfig.model_validate(resolved)
    except ValidationError as exc:
        # Problems at a key whose reference was not resolved come from the placeholder, not the file.
        found = [(loc, msg) for loc, msg in problems_of(exc, raw)
                 if not any(loc[:len(key)] == key for key, _ in unresolved)]
        return Checked(None, found, unresolved, raw)
    config._path = file
    config._base_dir = base_dir
    config._unresolved = {key_path(loc): msg for loc, msg in unresolved}
    conf = (resolved.get("spark") or {}).get("conf") if isinstance(resolved.get("spark"), dict) else None
    config._referenced_conf = frozenset(
        key for key, value in (conf or {}).items() if _REFERENCE.search(str(original_conf.get(key, ""))))
    bind_iceberg_catalog(config.iceberg_catalog())  # the Iceberg table format's catalog (config.iceberg)
    return Checked(config, [], unresolved, raw)


def _placeholders(raw: Any, unresolved: list[Loc]) -> Any:
    """`raw` whose unresolved references (each replaced by `UNRESOLVED` in place, so a Connect URL
    with a `${ENV:...}` token stays a URL) still pass their key's rules: a `[ledger] url` that was
    one whole reference becomes a placeholder URL."""
    if ("ledger", "url") in unresolved:
        section = raw["ledger"]
        if not str(section["url"]).startswith(("postgresql://", "postgres://")):
            section["url"] = _UNRESOLVED_URL
    return raw


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
        return UNRESOLVED  # only seen with secrets=False: with secrets the problem stops the load

    return _REFERENCE.sub(replace, value)


def _config_error(path: str, problems: list[Problem]) -> ConfigError:
    shown = [f"{key_path(loc)}: {msg}" if loc else msg for loc, msg in problems[:_SHOWN]]
    more = f" (+{len(problems) - _SHOWN} more)" if len(problems) > _SHOWN else ""
    return ConfigError(" ".join(f"{path}: {'; '.join(shown)}{more}".split()))
