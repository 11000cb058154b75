"""Plugin test helpers: a versioned drop-in plugin, writing plugin files, chain requests, a plugin
host without installed packages or environment, and messages."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Any

from mqbridge import Message
from mqbridge.plugins import PluginHost
from mqbridge.plugins.discovery import DROPIN_PREFIX
from mqbridge.plugins.generation import ChainRequest

STAMP = '''
from mqbridge import PreprocessorOptions, current_chain, hookimpl

__version__ = "{version}"


class StampOptions(PreprocessorOptions):
    header: str = "plugin_version"


class Stamp:
    def __init__(self, options):
        self.header = options.header

    def process(self, message):
        message.headers[self.header] = __version__
        message.headers["unit"] = str(current_chain().unit)
        return message


@hookimpl
def mqbridge_register_preprocessors(registry):
    registry.add("stamp", Stamp, options=StampOptions)
'''

#: A drop-in plugin whose `reject_poison` preprocessor fails every message whose body starts with
#: "poison" (a message failure: given back, then moved at the backout threshold).
REJECT_POISON = """
from mqbridge import hookimpl


class Reject:
    def process(self, message):
        if message.body.startswith(b"poison"):
            raise ValueError("a poison message")
        return message


@hookimpl
def mqbridge_register_preprocessors(registry):
    registry.add("reject_poison", lambda options: Reject())
"""


def write_plugin(folder: Path, name: str, code: str, mode: int = 0o644) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.py"
    path.write_text(textwrap.dedent(code))
    path.chmod(mode)
    return path


def poison_refusing_plugins(base: Path) -> Path:
    """`<base>/plugins` (0755, as the bridge demands whatever the umask) holding `REJECT_POISON`."""
    folder = base / "plugins"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    write_plugin(folder, "reject", REJECT_POISON)
    return folder


def listener(key: int = 0) -> str:
    """The name of the listener `request(..., key=key)` configures."""
    return f"amq:/queue/q{key}"


def request(*refs: str | tuple[str, dict[str, Any]], key: int = 0) -> ChainRequest:
    pairs = tuple((r, {}) if isinstance(r, str) else r for r in refs)
    return ChainRequest(listener(key), f"listeners[{key}] ({listener(key)})", pairs)


def make_host(folder: Path | None, *requests: ChainRequest, **kwargs: Any) -> PluginHost:
    kwargs.setdefault("entry_points", lambda: [])
    kwargs.setdefault("disabled", ())
    return PluginHost([folder] if folder is not None else [], list(requests), **kwargs)


def message(body: bytes = b"hello", **kwargs: Any) -> Message:
    return Message(msg_id=kwargs.pop("msg_id", "m-1"), body=body, source="amq", destination="/queue/q0",
                   message_type="t", **kwargs)


def dropin_modules() -> list[str]:
    return [name for name in sys.modules if name.startswith(DROPIN_PREFIX)]
