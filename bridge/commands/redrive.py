"""`mqbridge redrive`: move messages from a listener's backout queue back to its source queue,
keeping their identity, so that the landing ledger stops any that had landed from landing twice
(`mqbridge.resend.redrive`; each source kind's move in its adapter package)."""

from __future__ import annotations

import argparse
from typing import Any

from mqbridge.commands.help import parser_help
from mqbridge.errors import ConfigError


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not 1 or more")
    return value


def add_parser(sub: Any) -> None:
    """Add `redrive` to the subparsers `sub`."""
    redrive = sub.add_parser("redrive", help="move messages from a listener's backout queue back to its queue, "
                                             "keeping their identity (nothing that landed lands twice)",
                             **parser_help("redrive"))
    redrive.add_argument("--config", "-c", required=True, help="configuration file (TOML)")
    redrive.add_argument("--listener", required=True, metavar="NAME",
                         help="the listener: its queue as configured, or SOURCE:QUEUE when two sources share it")
    redrive.add_argument("--limit", type=_positive, default=None, metavar="N",
                         help="move at most N messages (default: every message on the backout queue)")
    redrive.add_argument("--batch", type=_positive, default=100, metavar="N",
                         help="messages moved per unit of work (default 100)")
    redrive.add_argument("--dry-run", action="store_true",
                         help="list the messages (original id, when and why moved) and move nothing")
    redrive.set_defaults(handler=cmd_redrive)


def cmd_redrive(args: argparse.Namespace) -> int:
    from mqbridge.config import load_config
    from mqbridge.drivers import redrive_of
    from mqbridge.logsetup import setup_logging
    from mqbridge.resend.redrive import RedriveRequest, find_listener

    cfg = load_config(args.config)  # the source's password: the command connects to the broker
    setup_logging("WARNING")
    listener = find_listener(cfg.listeners, args.listener)
    source = cfg.sources[listener.source]
    if not listener.backout_queue and source.kind != "mq":  # MQ: the queue's BOQNAME
        raise ConfigError(f"--listener {args.listener}: the listener has no backout_queue to re-drive from")
    run = redrive_of(source.kind)
    request = RedriveRequest(limit=args.limit or 2**62, batch=min(args.batch, args.limit or args.batch),
                             dry_run=args.dry_run)
    verb = "listing (dry run: nothing is moved)" if args.dry_run else "moving"
    print(f"{verb} messages of {listener.backout_queue or 'its BOQNAME'} back to {listener.queue} "
          f"(source {listener.source})",
          flush=True)
    report = run(listener.source, source, listener, request, lambda line: print(line, flush=True))
    if args.dry_run:
        print(f"dry run: {report.listed} messages on {report.backout} would be moved (all left in place)")
        return 0
    print(f"re-drive: {report.moved} moved from {report.backout} to {report.target}, keeping their identity"
          + (f"; {report.without_identity} were not moved there by the bridge and went back as new messages"
             if report.without_identity else ""))
    return 0
