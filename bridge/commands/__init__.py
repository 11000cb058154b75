"""The subcommands of the `mqbridge` command line, one module each: every command module exposes
`add_parser(subparsers)`, which adds its parser and sets its `handler` default, and `mqbridge.cli`
adds them in the order of its `COMMANDS`. `help` holds every subcommand's description, example and
exit codes; `endpoint` the options of the commands that ask a running bridge."""

from __future__ import annotations

from pathlib import Path


def shown_path(path: Path | str) -> Path:
    """`path` as an operator reads it: absolute, without `..` or symlinks (`config/../data` is shown
    as the directory it is)."""
    return Path(path).resolve()
