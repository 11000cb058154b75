"""Bridge configurations for tests, built one way (the shape of tox's `tox_project`: data in, a file
and the loaded configuration out).

A `BridgeToml` holds a configuration's tables as data. A preset holds what a kind of test needs:
`orders` here (the smallest valid configuration); `tests.support.bridge.amq_bridge` and
`make_config` (a bridge in this process on ActiveMQ and local Spark); `tests.support.processes`'
`stomp_bridge` and `mq_bridge` (a `mqbridge run` process); `tests.support.memory.memory_config`
(the in-memory source); `tests.support.purge.purge_bridge`. A test then states only what it is
about, e.g. `.set("bridge", control_interval="4s")`, and renders the text (`text()`), writes the
file (`write(path)`) or validates it as the bridge does (`parse(path)`).

TOML a test writes by hand goes in as it is (`add(where, text)`), so a test can still show the
exact lines it is about.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mqbridge.config import BridgeConfig, parse_config

#: Where `BridgeToml.add` puts text besides a table's name: before every table, at the end of the
#: last `[[listeners]]` table, after everything.
HEAD, LISTENER, TAIL = "head", "listener", "tail"

_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def toml_value(value: Any) -> str:
    """`value` as a TOML value: strings (and paths), booleans, numbers, lists, inline tables."""
    if isinstance(value, Path):
        value = str(value)
    if isinstance(value, str):
        return '"' + "".join(_ESCAPES.get(c) or (c if c >= " " and c != "\x7f" else f"\\u{ord(c):04x}")
                             for c in value) + '"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{_key(k)} = {toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"no TOML value for {value!r}")


def _key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else toml_value(key)


def _lines(keys: Mapping[str, Any]) -> list[str]:
    return [f"{_key(k)} = {toml_value(v)}" for k, v in keys.items() if v is not None]


def _keys_set_in(text: str) -> set[str]:
    """The bare keys `text` sets in its own table (before the header of any sub-table it goes on to)."""
    keys: set[str] = set()
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("["):
            break
        if match := re.match(r"([A-Za-z0-9_-]+)\s*=", stripped):
            keys.add(match.group(1))
    return keys


@dataclass(frozen=True)
class BridgeToml:
    """A bridge configuration as data: `tables` by dotted name in file order ("bridge",
    "types.orders", "sources.amq", "spark.conf"...), the `[[listeners]]` tables, and TOML text
    added as it is (`extra`: by table name, or HEAD, LISTENER, TAIL). A key whose value is None is
    left out. Every method returns a new BridgeToml."""

    tables: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    listeners: tuple[Mapping[str, Any], ...] = ()
    extra: Mapping[str, str] = field(default_factory=dict)

    def set(self, table: str, **keys: Any) -> BridgeToml:
        """These keys set in `table` (added at the end if it is new; None removes a key)."""
        tables = dict(self.tables)
        tables[table] = {**tables.get(table, {}), **keys}
        return BridgeToml(tables, self.listeners, self.extra)

    def listener(self, **keys: Any) -> BridgeToml:
        """A `[[listeners]]` table with these keys added after the others."""
        return BridgeToml(self.tables, (*self.listeners, keys), self.extra)

    def every_listener(self, **keys: Any) -> BridgeToml:
        """These keys set in every `[[listeners]]` table."""
        return BridgeToml(self.tables, tuple({**keys_of, **keys} for keys_of in self.listeners), self.extra)

    def without(self, table: str) -> BridgeToml:
        """This configuration without `table`."""
        return BridgeToml({k: v for k, v in self.tables.items() if k != table}, self.listeners, self.extra)

    def add(self, where: str, text: str) -> BridgeToml:
        """`text` (TOML lines) added at the end of table `where`, or at HEAD, LISTENER or TAIL."""
        extra = dict(self.extra)
        extra[where] = extra[where] + "\n" + text if extra.get(where) else text
        return BridgeToml(self.tables, self.listeners, extra)

    def text(self) -> str:
        """The configuration file's text."""
        parts = [self.extra.get(HEAD, "")]
        for name, keys in self.tables.items():
            added = self.extra.get(name, "")
            own = _keys_set_in(added)  # text a test wrote by hand wins over a preset's key
            parts += [f"[{name}]", *_lines({k: v for k, v in keys.items() if k not in own}), added]
        for n, keys in enumerate(self.listeners, 1):
            parts += ["[[listeners]]", *_lines(keys)]
            if n == len(self.listeners):
                parts.append(self.extra.get(LISTENER, ""))
        parts.append(self.extra.get(TAIL, ""))
        return "\n".join(part for part in parts if part) + "\n"

    def write(self, path: Path) -> Path:
        """Write the file at `path` (making its folder); `path`."""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.text())
        return path

    def parse(self, path: Path | None = None) -> BridgeConfig:
        """Validate as the bridge loads a file at `path` (relative paths are taken from its folder;
        without a path, from the current directory)."""
        return parse_config(self.text(), str(path)) if path is not None else parse_config(self.text())


def fake_mq_source(queue_manager: str) -> dict[str, Any]:
    """The keys of a `[sources.X]` table for the fake IBM MQ queue manager `queue_manager`."""
    return {"kind": "mq", "queue_manager": queue_manager, "channel": "DEV.APP.SVRCONN",
            "conn_name": "mqhost(1414)"}


def orders(head: str = "", listener: str = "", source: str = "") -> BridgeToml:
    """The smallest valid configuration: one type `orders` read by one STOMP listener on
    /queue/orders of source `amq`. `head` adds TOML before the type (e.g. `[bridge]`,
    `[monitoring]`); `listener` adds keys to the `[[listeners]]` table (e.g.
    `backout_threshold = 0`); `source` adds keys to the `[sources.amq]` table."""
    toml = BridgeToml({"types.orders": {}, "sources.amq": {"kind": "stomp"}},
                      ({"source": "amq", "queue": "/queue/orders", "message_type": "orders",
                        "backout_queue": "/queue/orders.backout"},))
    for where, text in ((HEAD, head), ("sources.amq", source), (LISTENER, listener)):
        if text:
            toml = toml.add(where, text)
    return toml


def orders_config(head: str = "", listener: str = "", source: str = "") -> str:
    """The text of `orders(head, listener, source)`."""
    return orders(head, listener, source).text()


def typed_orders(warehouse: Path, schema: str, table: str = "orders") -> str:
    """`orders()` with a JSON type of `schema` landing into `table` under `warehouse`, no plugins,
    no monitoring: the text of a configuration the schema checks read."""
    return (orders().set("bridge", plugin_dirs=[]).set("monitoring", listen="").set("spark", warehouse=str(warehouse))
            .set("types.orders", format="json", schema=schema)
            .add("types.orders", f"table = {toml_value(table)}").text())  # `set` takes its table as `table`
