"""`mqbridge where`: where is a message? In flight, landed, moved to a backout queue, or unknown
(`mqbridge.tracing.where`).

It asks the running bridge first (`GET /messages/<id>` on its monitoring endpoint, which alone knows
what is in flight), reached as `mqbridge status` reaches it: the endpoint, TLS and token of
`--config`'s `[monitoring]`, or `--url` with `--cacert` and `--token-file`. With `--config`, when no
bridge answers there (not running, monitoring disabled, an endpoint without a token or without the
lookup), it answers from the files itself: the landing ledger, read-only, and the backout log of
the configuration's `state_dir`, and says that it did. The answer tells which.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
from typing import Any

from mqbridge.commands.endpoint import EndpointError, add_endpoint_options, check_options, endpoint
from mqbridge.commands.help import parser_help
from mqbridge.config import BridgeConfig, load_config
from mqbridge.config.warehouse import Location
from mqbridge.errors import ConfigError, LedgerError, StatusUnreachableError
from mqbridge.landing.ledger import Ledger, ledger_path, open_ledger_for_reading, owner_id
from mqbridge.monitoring.lookup import ask
from mqbridge.tracing.backout_log import BackoutLog
from mqbridge.tracing.where import NO_LEDGER, Locator, check_id

#: Exit codes (also in `mqbridge where --help`).
EXIT_LANDED, EXIT_UNKNOWN, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_IN_FLIGHT, EXIT_MOVED = 0, 1, 2, 3, 4, 5
EXIT_CODES = {"landed": EXIT_LANDED, "unknown": EXIT_UNKNOWN, "in_flight": EXIT_IN_FLIGHT, "moved": EXIT_MOVED}


def add_parser(sub: Any) -> None:
    """Add `where` to the subparsers `sub`."""
    where = sub.add_parser("where", help="where is a message: in flight, landed, moved to a backout queue, or "
                                         "unknown; exit 0 landed, 1 unknown, 3 unreachable, 4 in flight, 5 moved",
                           **parser_help("where"))
    where.add_argument("id", metavar="ID", help="the message id as the source gives it, or its identity (the "
                                                "listener's identity rule: a header's value, a body's SHA-256)")
    add_endpoint_options(where, "configuration file: its [monitoring] to ask, and its ledger and backout log when "
                                "no bridge answers")
    where.add_argument("--json", action="store_true", help="print the answer as JSON")
    where.set_defaults(handler=cmd_where, parser=where)


def cmd_where(args: argparse.Namespace) -> int:
    """Ask, print the answer, and exit with its state's code (`EXIT_CODES`)."""
    try:
        check_options(args)  # before the configuration is read
    except EndpointError as exc:
        args.parser.error(str(exc))
    problem = check_id(args.id)
    if problem is not None:
        args.parser.error(problem)
    config = load_config(args.config, secrets=False) if args.config else None
    try:
        doc = locate(args, config)
    except StatusUnreachableError as exc:
        print(f"mqbridge where: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    print(json.dumps(doc, indent=2, default=str) if args.json else render(doc))
    return EXIT_CODES[doc["state"]]


def locate(args: argparse.Namespace, config: BridgeConfig | None) -> dict[str, Any]:
    """The answer: the running bridge's, or (with a configuration) the files' when no bridge answers.
    StatusUnreachableError when nothing answers and there is no configuration, or the endpoint
    refuses the token."""
    try:
        url, credentials = endpoint(args)
    except EndpointError as exc:
        if exc.code != EXIT_UNREACHABLE:
            args.parser.error(str(exc))
        if config is None:
            raise StatusUnreachableError(str(exc)) from exc
        return from_files(config, args.id, f"{exc}".replace("; give --url", ""))
    try:
        code, doc = ask(url, args.id, args.timeout, credentials)
    except StatusUnreachableError as exc:
        if config is None or isinstance(exc.__cause__, urllib.error.HTTPError):  # a 401: it runs, but refuses us
            raise
        return from_files(config, args.id, str(exc))
    if code == 200 and doc.get("state") in EXIT_CODES:
        doc["answered_by"] = f"the running bridge at {url}"
        return doc
    why = f"{url} answered HTTP {code}: {doc.get('error', '')}".rstrip(": ")
    if config is None or code not in (403, 404):
        raise StatusUnreachableError(why)
    return from_files(config, args.id, why)


def from_files(config: BridgeConfig, key: str, why: str) -> dict[str, Any]:
    """The answer of the landing ledger (read-only) and the backout log of `config`, asked because
    no running bridge answered (`why`)."""
    state_dir = config.resolve_path(config.bridge.state_dir)
    ledger, note = _open_ledger(config)
    tables_note = ""
    try:  # an object store's URI carrying its delta-rs options: its keys must resolve
        warehouse: Location | None = config.tables_warehouse()
    except ConfigError as exc:
        warehouse, tables_note = None, f"the tables are not read, only the ledger: {exc}"
    try:
        backout_log = BackoutLog.in_state_dir(state_dir)
        doc = Locator(config.listeners, config.bridge.dedupe_window, ledger=ledger, backout_log=backout_log,
                      ledger_note=note, warehouse=warehouse).locate(key)
    finally:
        if ledger is not None:
            ledger.close()
    doc["answered_by"] = "the landing ledger and the backout log"
    doc["notes"].insert(0, f"no running bridge was asked, so a message in flight is not seen: {why}")
    if tables_note:
        doc["notes"].append(tables_note)
    return doc


def _open_ledger(config: BridgeConfig) -> tuple[Ledger | None, str]:
    """The ledger of `config`, read-only, or None and why not."""
    if not config.bridge.exactly_once:
        return None, NO_LEDGER
    if config.ledger.url is None:
        path = ledger_path(config.resolve_path(config.bridge.state_dir))
        if not path.exists():
            return None, (f"no ledger file {path.resolve()} (nothing landed with exactly_once yet, or state_dir "
                          "is wrong)")
    else:
        config.require_resolved("ledger")  # the PostgreSQL URL holds the password
    try:
        return open_ledger_for_reading(config, owner=owner_id()), ""
    except LedgerError as exc:
        return None, f"the landing ledger cannot be opened: {exc}"


def render(doc: dict[str, Any]) -> str:
    """The answer for a person."""
    state = doc["state"]
    head = {"in_flight": "is IN FLIGHT", "landed": "LANDED", "moved": "was MOVED to a backout queue",
            "unknown": "is UNKNOWN"}[state]
    out = [f"{doc['id']} {head} (answered by {doc.get('answered_by', 'the bridge')})"]
    for held in doc.get("in_flight", []):
        out += _in_flight_lines(held)
    if "landed" in doc:
        out += _landed_lines(doc["landed"], also=state != "landed")
    if "moved" in doc:
        out += _moved_lines(doc["moved"], also=state != "moved")
    if state == "unknown":
        out.append(f"  searched   {', '.join(doc.get('searched') or ['nothing'])}")
    out += [f"  note       {note}" for note in doc.get("notes", [])]
    return "\n".join(out)


def _in_flight_lines(held: dict[str, Any]) -> list[str]:
    if held.get("bulk_state") == "prepared":  # from the ledger: a bulk being published, or left to recovery
        return [f"  bulk       {held['bulk']}: prepared by {held['owner']} at {held['prepared']}, not published yet",
                f"  table      {held['table']}" + (f", put_date {held['put_date']}" if held.get("put_date") else "")]
    lines = [f"  listener   {held.get('listener') or '-'}" + (f" (unit {held['unit']})" if held.get("unit") else ""),
             f"  bulk       {held.get('bulk') or '- (not in a bulk yet)'}"
             + (f" ({held['bulk_state']})" if held.get("bulk_state") else ""),
             f"  since      {held['received']} ({held['seconds_in_flight']}s), delivery {held['delivery_count']}"]
    if held.get("identity") and held["identity"] != held.get("msg_id"):
        lines.append(f"  msg_id     {held['msg_id']}, identity {held['identity']}")
    return lines


def _landed_lines(landed: dict[str, Any], *, also: bool) -> list[str]:
    put_date = landed.get("put_date") or " or ".join(landed.get("put_dates") or ["?"])
    lines = [f"  {'also landed' if also else 'table':<10} {landed['table']}, put_date {put_date}",
             f"  bulk       {landed['bulk']}, published {landed['published']}"]
    if landed.get("delta_version") is not None:
        lines.append(f"  delta      version {landed['delta_version']} committed it at {landed['committed']}")
    if landed.get("delta_note"):
        lines.append(f"  {'purged' if landed.get('in_table') is False else 'delta':<10} {landed['delta_note']}")
    lines += [f"  rewritten  put_date {r['put_date']} at {r['at']} ({r['by']}): {r['means']}"
              for r in landed.get("rewritten", [])]
    if landed.get("purged"):
        lines.append(f"  purged     at {landed['purged']}: the message's row is no longer in the table")
    return lines


def _moved_lines(moved: dict[str, Any], *, also: bool) -> list[str]:
    queue = moved.get("backout_queue") or "the source's backout queue"
    return [f"  {'also moved' if also else 'moved to':<10} {queue} at {moved['time']}, from {moved['queue']} "
            f"by {moved['listener']}",
            f"  reason     {moved['reason']}"]
