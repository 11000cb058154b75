"""The control plane of the monitoring endpoint: `POST` requests that change a running bridge.

    POST /listeners/<name>/pause      finish the units of work in flight, take no new one (connections stay)
    POST /listeners/<name>/resume     take units of work again
    POST /listeners/<name>/stop       finish the units of work in flight, end the threads, close connections
    POST /listeners/<name>/start      start the threads again (also those that halted)
    POST /listeners/<name>/threads/<n>  run n threads (1 to 64)
    POST /listeners/<name>/plugins/<to>  move it to plugin generation <to>: a number (one still loaded),
                                      `latest` (pinned to the promoted one) or `follow` (every reload)

`<name>` is the listener's queue as configured, or `source:queue` when two sources share the queue
name, URL-encoded as one path segment (`%2Fqueue%2Forders`; left unencoded it is read too). The
answer is 200 with a JSON document (`mqbridge.supervision.control.Outcome`) once the command is accepted; the
control thread applies it within 0.25 s and `/status` (`listener_controls`) says when it is in effect.
Refusals are plain text, one line saying why: 403 when `[monitoring] token` is not set (the control
plane is off: without a token anyone who reaches the port could stop the bridge's intake, even with
`metrics_public`), 401 without the right token, 404 for a listener the bridge does not have (naming
those it has), 409 for an ambiguous queue name or a command the listener's state does not allow
(a plugin generation no longer loaded, a canary listener to pin), 400 for a thread count out of
range or a plugin generation that is none. Refusals are logged at INFO with the caller, as commands are.

    POST /tables/delete               delete landed rows (`mqbridge tables delete`, mqbridge.maintenance.entries)

Its body is a JSON object: `{"type": "orders", "identity": ["4711"]` or `"where": "SQL"`, `"reason":
"why", "dry_run": false}`; the answer is 200 with what went per table, once the rows are deleted (a
Spark job: seconds to minutes), 400 for a request that names no rows, no reason or an unknown type,
422 when a table cannot evaluate the condition. Behind the same token; logged with the caller.
"""

from __future__ import annotations

import json
import logging
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from mqbridge.errors import AmbiguousListenerError, ControlConflictError, ControlError, UnknownListenerError
from mqbridge.monitoring.access import Access

log = logging.getLogger(__name__)

PREFIX = "/listeners/"
#: The actions of `POST /listeners/<name>/<action>` (threads takes a count: `/threads/<n>`).
ACTIONS = ("pause", "resume", "stop", "start")
#: The actions that take an argument in the last segment: `/threads/<n>`, `/plugins/<to>`.
WITH_ARGUMENT = ("threads", "plugins")
USAGE = ("POST /listeners/<name>/pause, /resume, /stop, /start, /threads/<n> or /plugins/<generation|latest|"
         "follow>, where <name> is the queue (or source:queue), URL-encoded")
TEXT = "text/plain; charset=utf-8"


#: The path of the deletion of landed rows, and the largest body it reads.
TABLES_DELETE = "/tables/delete"
MAX_BODY = 1 << 20
DELETE_USAGE = ('POST /tables/delete with a JSON body {"type": NAME, "identity": [ID, ...] or "where": SQL, '
                '"reason": TEXT, "dry_run": false}')


#: What `POST /tables/delete` needs of the bridge (`mqbridge.maintenance.entries.request_deleter`): the
#: request and its caller in, the answer's JSON document out; ConfigError for a bad request, PurgeError
#: when a table refuses the condition.
EntryDeleter = Callable[[dict[str, Any], str], dict[str, Any]]


class ListenerCommands(Protocol):
    """What the control plane needs of the bridge: `mqbridge.supervision.control.ListenerControls` is one."""

    def command(self, name: str, action: str, threads: int | None = None, *, target: str | None = None) -> Any:
        """Apply `action` (`threads` the count of threads, `target` the generation of plugins); an
        object with `as_dict()`, or a ControlError."""


@dataclass(frozen=True)
class Reply:
    """One HTTP answer."""

    code: int
    content_type: str
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


def _text(code: int, line: str, headers: dict[str, str] | None = None) -> Reply:
    return Reply(code, TEXT, f"{line}\n".encode(), headers or {})


def parse(path: str) -> tuple[str, str, int | str | None] | None:
    """(listener name, action, argument) of a control path, or None if it is not one: the argument
    is the thread count of `threads` (an int), the target of `plugins` (as given), else None. The
    name may be one URL-encoded segment or several raw ones (`/listeners//queue/orders/pause`)."""
    path = path.split("?", 1)[0]
    if not path.startswith(PREFIX):
        return None
    parts = path[len(PREFIX):].rstrip("/").split("/")
    argument: int | str | None = None
    if len(parts) >= 2 and parts[-1] in ACTIONS:
        raw, action = parts[:-1], parts[-1]
    elif len(parts) >= 3 and parts[-2] in WITH_ARGUMENT:
        raw, action, argument = parts[:-2], parts[-2], urllib.parse.unquote(parts[-1])
        if action == "threads":
            try:
                argument = int(argument)
            except ValueError:
                return None
    else:
        return None
    name = urllib.parse.unquote("/".join(raw))
    return (name, action, argument) if name else None


def answer_post(access: Access, commands: ListenerCommands | None, path: str, authorization: str | None,
           client: str) -> Reply:
    """The answer to `POST path` from `client` with this `Authorization` header."""
    shown = path.split("?", 1)[0]
    refused = _refused(access, shown, authorization, client)
    if refused is not None:
        return refused
    parsed = parse(path)
    if parsed is None or commands is None:
        return _text(404, f"not found: {USAGE}")
    name, action, argument = parsed
    try:
        if action == "plugins":
            outcome = commands.command(name, action, target=str(argument))
        else:
            outcome = commands.command(name, action, argument if isinstance(argument, int) else None)
    except UnknownListenerError as exc:
        return _refusal(404, client, shown, exc)
    except (AmbiguousListenerError, ControlConflictError) as exc:
        return _refusal(409, client, shown, exc)
    except ControlError as exc:
        return _refusal(400, client, shown, exc)
    document = outcome.as_dict()
    log.info("monitoring: %s POST %s: %s: %s", client, shown, document["listener"], document["message"])
    return Reply(200, "application/json", json.dumps(document).encode())


def _refusal(code: int, client: str, shown: str, exc: ControlError) -> Reply:
    """A command the bridge refuses: logged with its caller (as accepted ones are), answered with why."""
    log.info("monitoring: %s POST %s refused (%d): %s", client, shown, code, exc)
    return _text(code, str(exc))


def _refused(access: Access, shown: str, authorization: str | None, client: str) -> Reply | None:
    """The refusal of a control-plane request without a configured token or the right one, or None."""
    if access.token is None:
        log.info("monitoring: %s POST %s refused: no [monitoring] token, the control plane is off", client, shown)
        return _text(403, "the control plane is off: it needs [monitoring] token (see docs/security.md); without a "
                          "token anyone who reaches this port could pause or stop the bridge's listeners")
    denial = access.check(shown, authorization)
    if denial is not None:
        log.info("monitoring: %s POST %s refused: %s", client, shown, denial.reason)
        return _text(401, "authentication required: Authorization: Bearer <token>",
                     {"WWW-Authenticate": denial.challenge})
    return None


def answer_tables_delete(access: Access, deleter: EntryDeleter | None, path: str, authorization: str | None,
                         client: str, body: bytes) -> Reply:
    """The answer to `POST /tables/delete` from `client` with this `Authorization` header and `body`."""
    from mqbridge.errors import ConfigError, PurgeError

    shown = path.split("?", 1)[0]
    refused = _refused(access, shown, authorization, client)
    if refused is not None:
        return refused
    if deleter is None:
        return _text(404, "not found: this bridge deletes no rows (no tables configured)")
    try:
        request = json.loads(body or b"{}")
    except ValueError:
        request = None
    if not isinstance(request, dict):
        return _text(400, f"the body is not a JSON object: {DELETE_USAGE}")
    try:
        document = deleter(request, client)
    except ConfigError as exc:
        return _text(400, f"{exc}: {DELETE_USAGE}")
    except PurgeError as exc:
        return _text(422, str(exc))
    return Reply(200, "application/json", json.dumps(document).encode())
