"""`mqbridge service install|remove|start|stop (--systemd | --windows)`."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from mqbridge.config import BridgeConfig, load_config, parse_duration
from mqbridge.errors import ServiceError
from mqbridge.service.controller import STOP_MARGIN
from mqbridge.service.systemd import (
    DEFAULT_UNIT_DIR,
    DEFAULT_USER,
    UnitSpec,
    prepare_directories,
    render_unit,
    unit_name,
)

DEFAULT_CONFIG = (Path(os.environ.get("PROGRAMDATA", "C:/ProgramData")) / "mqbridge" / "mqbridge.toml"
                  if sys.platform == "win32" else Path("/etc/mqbridge/mqbridge.toml"))


def add_parser(sub: Any) -> None:
    """Add the `service` command to the `mqbridge` subcommands (entry point `mqbridge.commands`)."""
    service = sub.add_parser("service", help="install or remove the bridge as a systemd or Windows service")
    service.set_defaults(handler=cmd_service)
    actions = service.add_subparsers(dest="action", required=True)
    for action, text in (("install", "write the systemd unit / register the Windows service"),
                         ("remove", "remove the systemd unit / the Windows service"),
                         ("start", "start the Windows service (systemd: systemctl start)"),
                         ("stop", "stop the Windows service, waiting for the drain (systemd: systemctl stop)")):
        parser = actions.add_parser(action, help=text)
        kind = parser.add_mutually_exclusive_group(required=True)
        kind.add_argument("--systemd", dest="kind", action="store_const", const="systemd", help="a systemd unit")
        kind.add_argument("--windows", dest="kind", action="store_const", const="windows", help="a Windows service")
        parser.add_argument("--config", "-c", default=str(DEFAULT_CONFIG),
                            help=f"configuration file (default {DEFAULT_CONFIG})")
        if action == "install":
            parser.add_argument("--user", default=None, help="systemd: run as this user (default mqbridge)")
            parser.add_argument("--print", dest="print_only", action="store_true",
                                help="systemd: print the unit instead of writing it")
            parser.add_argument("--watchdog", default=None, metavar="DURATION",
                                help="systemd: WatchdogSec (default 4 control intervals, at least 60s; 0 disables)")
        if action in ("install", "remove"):
            parser.add_argument("--unit-dir", default=None,
                                help="systemd: unit directory (default /etc/systemd/system)")
            parser.add_argument("--follow", dest="subcommand", action="store_const", const="follow", default="run",
                                help="systemd: the unit of `mqbridge follow` (mqbridge-NAME-follow.service), which "
                                     "sends landed rows on per [[forwards]], beside the bridge's")


def cmd_service(args: argparse.Namespace) -> int:
    """Run one `mqbridge service ...` command."""
    if args.kind == "windows" and getattr(args, "subcommand", "run") != "run":
        raise ServiceError("--follow writes a systemd unit; a Windows service runs `mqbridge run` only")
    if args.kind == "windows":
        if sys.platform != "win32":
            raise ServiceError("--windows installs a Windows service and only works on Windows "
                               f"(this is {sys.platform}); on Linux use --systemd")
        return _windows(args)
    if not sys.platform.startswith("linux"):
        raise ServiceError(f"--systemd only works on Linux (this is {sys.platform}); on Windows use --windows")
    if args.action in ("start", "stop"):
        raise ServiceError(f"with systemd use: systemctl {args.action} {_systemd_unit_name(args)}")
    return _install_systemd(args) if args.action == "install" else _remove_systemd(args)


def _load(args: argparse.Namespace) -> tuple[BridgeConfig, Path]:
    path = Path(os.path.abspath(args.config))
    return load_config(path), path


def _systemd_unit_name(args: argparse.Namespace) -> str:
    config, _path = _load(args)
    return unit_name(config.bridge.name, getattr(args, "subcommand", "run"))


def _install_systemd(args: argparse.Namespace) -> int:

    config, path = _load(args)
    user = args.user or DEFAULT_USER
    watchdog = parse_duration(args.watchdog) if args.watchdog is not None else None
    if args.subcommand == "follow" and not config.forwards:
        raise ServiceError(f"{path}: no [[forwards]]: `mqbridge follow` would have nothing to send")
    spec = UnitSpec.from_config(config, path, user=user, watchdog=watchdog, subcommand=args.subcommand)
    text = render_unit(spec)
    if args.print_only:
        sys.stdout.write(text)
        return 0
    import pwd

    try:
        pwd.getpwnam(user)
    except KeyError:
        raise ServiceError(f"user {user!r} does not exist: create it (useradd --system --no-create-home "
                           f"--shell /usr/sbin/nologin {user}) or pass --user") from None
    unit_dir = Path(args.unit_dir) if args.unit_dir else DEFAULT_UNIT_DIR
    target = unit_dir / spec.unit_name
    try:
        created = prepare_directories(spec)
        target.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ServiceError(f"cannot write {exc.filename or target}: {exc.strerror or exc} (run as root?)") from None
    for directory in created:
        print(f"created {directory}")
    print(f"wrote {target}\nnext: systemctl daemon-reload && systemctl enable --now {spec.unit_name}")
    if spec.subcommand == "run":
        print(f"      (reload the configuration and plugins: systemctl reload {spec.unit_name})")
    return 0


def _remove_systemd(args: argparse.Namespace) -> int:
    name = _systemd_unit_name(args)
    target = (Path(args.unit_dir) if args.unit_dir else DEFAULT_UNIT_DIR) / name
    if not target.exists():
        raise ServiceError(f"{target}: no such unit file")
    # What `systemctl disable` removes: the [Install] symlinks (WantedBy=multi-user.target).
    links = [link for link in target.parent.glob(f"*.wants/{name}") if link.is_symlink()]
    try:
        for link in links:
            link.unlink()
            print(f"removed {link} (disabled)")
        target.unlink()
    except OSError as exc:
        raise ServiceError(f"cannot remove {exc.filename or target}: {exc.strerror or exc} (run as root?)") from None
    print(f"removed {target}\nnext: systemctl stop {name} (if it runs) && systemctl daemon-reload")
    return 0


def _windows(args: argparse.Namespace) -> int:  # pragma: no cover - Windows only
    try:
        from mqbridge.service import windows
    except ImportError as exc:
        raise ServiceError(f"pywin32 is missing ({exc}): pip install \"mqbridge[windows]\"") from None
    config, path = _load(args)
    name = config.bridge.name
    if args.action == "install":
        print(f"installed {windows.install(path, name)} (automatic start, restart on failure); "
              f"start it with: mqbridge service start --windows --config {path}")
    elif args.action == "remove":
        print(f"removed {windows.remove(name)}")
    elif args.action == "start":
        print(f"started {windows.start(name)}")
    else:
        print(f"stopped {windows.stop(name, config.bridge.shutdown_timeout + STOP_MARGIN)}")
    return 0
