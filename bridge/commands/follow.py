"""`mqbridge follow`: the standing reverse path. Tails the tables of the configuration's `[[forwards]]`
and sends every row landed there on to each forward's destinations, once per row and destination
across kills (`mqbridge.resend.follow`). It runs until SIGTERM or SIGINT (a service of its own, beside
`mqbridge run`), or with `--until-idle` until it has found nothing to send for that long."""

from __future__ import annotations

import argparse
import signal
import threading
import time
from typing import Any

from mqbridge.commands.endpoint import duration
from mqbridge.commands.help import parser_help
from mqbridge.errors import ConfigError


def add_parser(sub: Any) -> None:
    """Add `follow` to the subparsers `sub`."""
    follow = sub.add_parser("follow", help="send the rows landed in the tables of [[forwards]] on to their "
                                           "destinations as they land, each once", **parser_help("follow"))
    follow.add_argument("--config", "-c", required=True, help="configuration file (TOML)")
    follow.add_argument("--forward", action="append", default=None, metavar="NAME",
                        help="only this forward (may be given more than once; default: every one)")
    follow.add_argument("--until-idle", type=duration, default=None, metavar="DURATION",
                        help="stop once no row has been found to send for this long (default: run until stopped)")
    follow.add_argument("--in-doubt-wait", type=duration, default=10.0, metavar="DURATION",
                        help="after a kill: how long to wait for the marker of a batch left in doubt (default 10s)")
    follow.set_defaults(handler=cmd_follow)


def cmd_follow(args: argparse.Namespace) -> int:
    from mqbridge.commands.replay import table_under
    from mqbridge.config import load_config
    from mqbridge.drivers import replay_target
    from mqbridge.landing import DriverSecrets, create_spark_session
    from mqbridge.landing.ledger import ledger_path, open_ledger_for_reading, owner_id
    from mqbridge.landing.session import SparkSessions
    from mqbridge.logsetup import setup_logging
    from mqbridge.resend.follow import Follower, FollowLedger, Lane
    from mqbridge.table_formats import command_session_conf

    cfg = load_config(args.config)
    setup_logging(cfg.logging.level)
    forwards = cfg.forwards
    if args.forward:
        unknown = sorted(set(args.forward) - {f.name for f in forwards})
        if unknown:
            raise ConfigError(f"--forward {', '.join(unknown)}: no such forward (configured: "
                              f"{', '.join(f.name for f in forwards) or 'none'})")
        forwards = [f for f in forwards if f.name in args.forward]
    if not forwards:
        raise ConfigError(f"{args.config}: no [[forwards]] to follow")
    state_dir = cfg.resolve_path(cfg.bridge.state_dir)
    if cfg.ledger.url is None and not ledger_path(state_dir).exists():
        raise ConfigError(f"no landing ledger in {state_dir} yet: start `mqbridge run` with this configuration first "
                          "(a forward finds newly landed bulks there)")
    warehouse = cfg.tables_warehouse()

    def open_target(lane: Lane) -> Any:
        source = cfg.sources[lane.forward.source]
        target = replay_target(source.kind, lane.forward.source, source, lane.destination, lane.id,
                               args.in_doubt_wait)
        print(f"forward {lane.forward.name}: rows of {lane.forward.table} to {lane.destination} (source "
              f"{lane.forward.source}); {target.guarantee}", flush=True)
        for note in target.notes:
            print(f"note: {note}", flush=True)
        return target

    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    landing = open_ledger_for_reading(cfg, owner=owner_id())
    ledger = FollowLedger.in_state_dir(state_dir)
    follower = None
    try:
        print(f"starting Spark ({cfg.spark.shown}) to read the forwards' tables", flush=True)
        conf = command_session_conf(cfg)  # what the formats and the store need (Delta's and S3A's jars)

        def start_session(**options: Any) -> Any:
            return create_spark_session(**{**options, "app_name": f"{cfg.spark.app_name}-follow", "conf": conf})

        sessions = SparkSessions(cfg.spark, secrets=DriverSecrets.of(cfg), create=start_session, state_dir=state_dir)
        sessions.get()
        follower = Follower(forwards, lambda name: table_under(warehouse, name), sessions, landing, ledger,
                            open_target, time.time, max(t.bulk_size for t in cfg.types.values()))
        print(f"following {', '.join(f.name for f in forwards)}", flush=True)
        follower.run(stop, until_idle=args.until_idle)
        for lanes in follower.lanes.values():
            for lane in lanes:
                bulks, rows = ledger.lane_totals(lane.id)
                print(f"forward {lane.forward.name} to {lane.destination}: {lane.rows} rows sent now; {rows} rows "
                      f"of {bulks} recent bulks recorded (follow ledger {ledger.path})", flush=True)
    finally:
        if follower is not None:
            follower.close_targets()
        ledger.close()
        landing.close()
    return 0
