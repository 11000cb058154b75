"""A bridge with a folder of drop-in plugins, on the real parts: a versioned plugin that stamps what
it processed, plugin files written the way a deployment replaces them, a steady producer, the
rows of a table."""

from __future__ import annotations

import os
import textwrap
import threading
from pathlib import Path
from typing import Any

from mqbridge.config import BridgeConfig
from tests.support.amq import AmqClient
from tests.support.bridge import make_config, read_table

STAMP = '''
from mqbridge import current_chain, hookimpl

VERSION = "{version}"


class Stamp:
    def process(self, message):
        chain = current_chain()
        message.headers["plugin_version"] = VERSION
        message.headers["unit"] = str(chain.unit)
        message.headers["generation"] = str(chain.generation)
        return message


@hookimpl
def mqbridge_register_preprocessors(registry):
    registry.add("stamp", lambda options: Stamp())
'''


def types(*names: str) -> str:
    """`[types.X]` tables of these names, 2 MB bulks flushed after 1 s."""
    return "".join(f'\n[types.{n}]\nbulk_size = "2MB"\nbulk_timeout = "1s"\n' for n in names)


def plugin_config(tmp_path: Path, body: str, **options: Any) -> BridgeConfig:
    """`make_config(tmp_path, body, **options)` with `plugin_dirs = ["plugins"]` (relative to the
    configuration file) and a faster control loop, which looks for changed plugin files."""
    bridge = {"plugin_dirs": ["plugins"], "control_interval": "300ms"}
    return make_config(tmp_path, body, bridge=bridge, **options)


def write_plugin(tmp_path: Path, name: str, code: str, mode: int = 0o644) -> Path:
    """Plugin `name` with `code` in `<tmp_path>/plugins`, replacing any file of that name at once."""
    folder = tmp_path / "plugins"
    folder.mkdir(exist_ok=True)
    path = folder / f"{name}.py"
    tmp = folder / f".{name}.tmp"  # write then rename: the bridge never reads a half-written file
    tmp.write_text(textwrap.dedent(code))
    tmp.chmod(mode)
    os.replace(tmp, path)
    return path


def rows_of(spark: Any, tmp_path: Path, table: str) -> list[Any]:
    """The rows of `table` under `<tmp_path>/landing`, as a reader sees them."""
    return read_table(spark, tmp_path / "landing" / table)


class Producer(threading.Thread):
    """Puts a steady stream of numbered messages until stopped."""

    def __init__(self, queue: str) -> None:
        super().__init__(name="test-producer", daemon=True)
        self.queue = queue
        self.sent: list[bytes] = []
        self.stop_event = threading.Event()

    def run(self) -> None:
        with AmqClient() as client:
            while not self.stop_event.is_set():
                bodies = [f"s{len(self.sent) + i:05d}".encode() for i in range(5)]
                client.put_many(self.queue, bodies)
                self.sent.extend(bodies)
                self.stop_event.wait(0.1)

    def stop(self) -> list[bytes]:
        self.stop_event.set()
        self.join(30)
        return self.sent
