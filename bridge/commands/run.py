"""`mqbridge run`: load the configuration, set up logging and signals, and run the bridge until it
is stopped (or, with `--until-idle`, until every listener has been idle that long)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from types import FrameType
from typing import Any, NoReturn

from mqbridge.commands.endpoint import duration
from mqbridge.commands.help import parser_help
from mqbridge.config import load_config
from mqbridge.logsetup import setup_from_config

log = logging.getLogger("mqbridge")
#: The levels `run --log-level` accepts (those of [logging] level).
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def add_parser(sub: Any) -> None:
    """Add `run` to the subparsers `sub`."""
    run = sub.add_parser("run", help="run the bridge", **parser_help("run"))
    run.add_argument("--config", "-c", required=True, help="configuration file (TOML)")
    run.add_argument("--until-idle", type=duration, default=None, metavar="DURATION",
                     help="exit 0 once every listener has been idle this long and every message is committed")
    run.add_argument("--log-level", default=None, type=str.upper, choices=LOG_LEVELS,
                     help="override [logging] level (any case)")
    run.set_defaults(handler=cmd_run)


def install_signal_handlers(stop: threading.Event, reload: threading.Event | None = None) -> None:
    """First SIGINT/SIGTERM: graceful shutdown. Second: exit at once (unacked messages return
    to the source when the connection drops). SIGHUP: sets `reload` (the control thread reloads
    plugins and the configuration file)."""

    def handler(signum: int, _frame: FrameType | None) -> None:
        if stop.is_set():
            os._exit(128 + signum)
        stop.set()

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
    if reload is not None and hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, lambda _signum, _frame: reload.set())


def cmd_run(args: argparse.Namespace) -> int:
    from mqbridge.app import run_bridge  # imports pyspark: only when the bridge runs

    cfg = load_config(args.config)
    setup_from_config(cfg, args.log_level)
    stop, reload = threading.Event(), threading.Event()
    install_signal_handlers(stop, reload)
    # A person watching a terminal gets one live progress line; a service's journal, a pipe or CI
    # keep the per-tick summary as a log line.
    progress = sys.stderr if args.until_idle is not None and sys.stderr.isatty() else None
    end_process(run_bridge(cfg, until_idle=args.until_idle, stop_event=stop, reload_event=reload,
                           progress=progress))


def end_process(code: int) -> NoReturn:
    """End `mqbridge run` with `code` once the bridge has shut down, without the interpreter's
    teardown. Why: by now everything the bridge owns is closed (listeners committed or backed
    out, bulks landed, the ledger closed), but library objects still run code at teardown, and
    some of it can block forever: a Spark Connect session left from before a server restart closes
    its gRPC channel in `__del__`, which hangs at interpreter exit. A service that does not end
    after its work is done gets killed by systemd instead. (The JVM of a local session exits by
    itself when our end of its pipe closes.)"""
    lingering = [t.name for t in threading.enumerate()
                 if t.is_alive() and not t.daemon and t is not threading.current_thread()]
    if lingering:
        log.debug("ending with library threads still running: %s", ", ".join(lingering))
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
