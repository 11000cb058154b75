"""The configuration text the check-config tests start from, and how they run the command (shared
by the lint and config tests; not a test module)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqbridge.cli import main

BASE = """\
[bridge]
plugin_dirs = []
[monitoring]
listen = ""
[types.orders]
[sources.amq]
kind = "stomp"
[[listeners]]
source = "amq"
queue = "/queue/orders"
message_type = "orders"
backout_queue = "/queue/orders.backout"
"""


def check(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, *args: str) -> tuple[int, list[str]]:
    path = tmp_path / "bridge.toml"
    path.write_text(text)
    code = main(["check-config", *args, "--config", str(path)])
    out = capsys.readouterr().out.replace(str(path), "bridge.toml")
    return code, out.splitlines()
