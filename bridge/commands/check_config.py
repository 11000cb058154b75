"""`mqbridge check-config`: lint a configuration file (`mqbridge.lint`) and say how it went.

The file may be given as `--config FILE` like every other command, or positionally as before.
"""

from __future__ import annotations

import argparse
from typing import Any

from mqbridge.commands.help import parser_help
from mqbridge.lint import lint_file
from mqbridge.logsetup import setup_logging


def add_parser(sub: Any) -> None:
    """Add `check-config` to the subparsers `sub`."""
    check = sub.add_parser("check-config", help="find everything `run` would refuse or warn about, without "
                                                "contacting a broker", **parser_help("check-config"))
    check.add_argument("config", nargs="?", default=None, metavar="FILE",
                       help="configuration file (TOML); the same as --config")
    check.add_argument("--config", "-c", dest="config_option", default=None, metavar="FILE",
                       help="configuration file (TOML)")
    check.add_argument("--strict", action="store_true", help="warnings count as problems (exit 1)")
    check.set_defaults(handler=cmd_check_config, parser=check)


def cmd_check_config(args: argparse.Namespace) -> int:
    """Print one line per finding and a summary; the exit code of `LintReport.exit_code`."""
    if args.config and args.config_option and args.config != args.config_option:
        args.parser.error(f"two configuration files given: {args.config} and --config {args.config_option}")
    path = args.config_option or args.config
    if not path:
        args.parser.error("a configuration file is required: mqbridge check-config --config FILE")
    setup_logging("CRITICAL")  # what loading the plugins logs is reported as findings
    report = lint_file(path)
    for line in report.lines():
        print(line)
    code = report.exit_code(strict=args.strict)
    errors, warnings = len(report.errors), len(report.warnings)
    counted = ", ".join(f"{n} {word}{'' if n == 1 else 's'}" for n, word in ((errors, "error"), (warnings, "warning"))
                        if n)
    if code == 0 and report.config is not None:
        cfg = report.config
        threads = sum(listener.start_threads for listener in cfg.listeners)
        print(f"{path}: OK{f' with {counted}' if counted else ''} ({len(cfg.sources)} sources, {len(cfg.types)} "
              f"types, {len(cfg.listeners)} listeners, {threads} listener threads)")
    else:
        print(f"{path}: {counted}{' (--strict: warnings count)' if args.strict and warnings and not errors else ''}")
    return code
