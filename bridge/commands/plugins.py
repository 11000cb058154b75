"""`mqbridge plugins`: list the preprocessor plugins, their preprocessors and load errors (exit 1
if any plugin failed to load)."""

from __future__ import annotations

import argparse
from typing import Any

from mqbridge.commands.help import parser_help
from mqbridge.config import load_config
from mqbridge.logsetup import setup_logging
from mqbridge.plugins import PluginHost, report


def add_parser(sub: Any) -> None:
    """Add `plugins` to the subparsers `sub`."""
    plugins = sub.add_parser("plugins", help="list preprocessor plugins, their preprocessors and load errors",
                             **parser_help("plugins"))
    plugins.add_argument("--config", "-c", default=None, help="configuration file (TOML): adds plugin_dirs and chains")
    plugins.set_defaults(handler=cmd_plugins)


def cmd_plugins(args: argparse.Namespace) -> int:
    setup_logging("CRITICAL")  # load errors are part of the listing
    host = PluginHost.from_config(load_config(args.config, secrets=False)) if args.config else PluginHost()
    host.start(strict=False)
    text, ok = report(host)
    host.close()
    print(text)
    return 0 if ok else 1
