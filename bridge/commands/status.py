"""`mqbridge status`: ask a running bridge's monitoring endpoint how it is (exit 0 healthy,
1 unhealthy, 3 unreachable)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from mqbridge.commands.endpoint import EndpointError, add_endpoint_options, endpoint
from mqbridge.commands.help import parser_help
from mqbridge.monitoring import EXIT_UNREACHABLE, run_status


def add_parser(sub: Any) -> None:
    """Add `status` to the subparsers `sub`."""
    status = sub.add_parser("status", help="show a running bridge's health, listeners, collector and Spark; "
                                           "exit 0 healthy, 1 unhealthy, 3 unreachable", **parser_help("status"))
    add_endpoint_options(status)
    status.set_defaults(handler=cmd_status)


def cmd_status(args: argparse.Namespace) -> int:
    try:
        url, credentials = endpoint(args)
    except EndpointError as exc:
        print(f"mqbridge status: {exc}", file=sys.stderr)
        return exc.code
    code, text = run_status(url, args.timeout, credentials)
    print(text, file=sys.stdout if code != EXIT_UNREACHABLE else sys.stderr)
    return code
