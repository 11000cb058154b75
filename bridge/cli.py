"""The `mqbridge` command line: the top-level parser, one subcommand per module of
`mqbridge.commands` (in the order of `COMMANDS`) and those other packages install, the exit codes
of the errors every command may raise. (The process's signals are `run`'s: `mqbridge.commands.run`.)"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import entry_points
from typing import Any

from mqbridge import __version__
from mqbridge.commands import (
    check_config,
    compact,
    follow,
    jars,
    ledger,
    listener,
    plugins,
    purge,
    redrive,
    replay,
    run,
    spark_archive,
    status,
    tables,
    where,
)
from mqbridge.errors import BridgeError, ConfigError

#: The built-in subcommands, in the order `mqbridge --help` lists them: each module's
#: `add_parser(subparsers)` adds its parser and sets its `handler` default.
COMMANDS = (run, check_config, spark_archive, jars, tables, purge, compact, plugins, status, listener, ledger,
            where, redrive, replay, follow)

#: Entry-point group of commands other packages add: `name = "module:add_parser"`, where
#: `add_parser(subparsers)` adds one subcommand and sets its `handler` default (`mqbridge service`).
COMMANDS_GROUP = "mqbridge.commands"


def installed_commands() -> list[Callable[[Any], None]]:
    """The `add_parser` functions of the installed command entry points, by name."""
    return [entry.load() for entry in sorted(entry_points(group=COMMANDS_GROUP), key=lambda e: e.name)]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mqbridge",
                                     description="Move messages from message queues into Spark tables.")
    parser.add_argument("--version", action="version", version=f"mqbridge {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for add_command in [command.add_parser for command in COMMANDS] + installed_commands():
        add_command(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        return handler(args)
    except ConfigError as exc:
        print(f"mqbridge: configuration error: {exc}", file=sys.stderr)
        return 2
    except BridgeError as exc:
        print(f"mqbridge: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
