"""`mqbridge listener pause|resume|stop|start|threads|plugins`: run-time control of a running bridge's
listeners over its authenticated control plane (`mqbridge.monitoring.control`), reached as
`mqbridge status` reaches it (`mqbridge.commands.endpoint`)."""

from __future__ import annotations

import argparse
import sys
import textwrap
from typing import Any

from mqbridge.commands.endpoint import EndpointError, add_endpoint_options, duration, endpoint
from mqbridge.commands.help import parser_help
from mqbridge.monitoring.control_client import EXIT_DONE, EXIT_NOT_IN_EFFECT, run_command

EXIT_CODES = """exit codes:
  0  in effect (with --wait 0: accepted)
  1  the bridge refused it: no such listener, a queue name two sources share, a thread count out of
     range, or a command its state does not allow (resume a stopped listener; plugins: a generation
     no longer loaded, a canary listener)
  2  configuration error (or options that do not go together)
  3  nothing answers at the endpoint, or it refused the request (401: no or a wrong token; 403: the
     bridge has no [monitoring] token, so its control plane is off)
  4  accepted, but not in effect within --wait (the last state is printed)"""

#: Each action: (one-line help, description, examples).
ACTIONS: dict[str, tuple[str, str, str]] = {
    "pause": (
        "finish the units of work in flight and take no new one; connections stay up",
        "Pause a listener: each of its threads finishes the units of work it holds (lands them and "
        "commits) and then takes no new one. Connections and heartbeats stay up, so resuming is "
        "immediate; its messages wait on the queue meanwhile. Waits until every thread holds nothing.",
        "  mqbridge listener pause --config /etc/mqbridge/bridge.toml /queue/orders\n"
        "  mqbridge listener pause -c bridge.toml amq:/queue/orders   # two sources read /queue/orders"),
    "resume": (
        "take units of work again after a pause",
        "Resume a paused listener: its threads take units of work again at once.",
        "  mqbridge listener resume --config /etc/mqbridge/bridge.toml /queue/orders"),
    "stop": (
        "finish the units of work in flight, end the threads and close their connections",
        "Stop a listener: each of its threads finishes the units of work it holds, then ends and closes "
        "its connections (the broker sees no consumer). The rest of the bridge goes on. Waits until "
        "every thread has ended.",
        "  mqbridge listener stop --config /etc/mqbridge/bridge.toml /queue/orders"),
    "start": (
        "start the threads of a stopped listener (or those that halted) again",
        "Start a listener: a stopped one connects and reads again; on a running one, threads that halted "
        "(a poison message nothing could move) or wait out a restart backoff start at once; a paused one "
        "resumes. Waits until every thread is connected.",
        "  mqbridge listener start --config /etc/mqbridge/bridge.toml /queue/orders"),
    "threads": (
        "run N threads (1 to 64) on the listener, without a restart",
        "Set a listener's thread count while it runs: new threads connect and read; threads beyond the "
        "count finish their units of work and end. It replaces [[listeners]] threads until the bridge "
        "restarts. Waits until the listener has that many threads connected.",
        "  mqbridge listener threads --config /etc/mqbridge/bridge.toml /queue/orders 4"),
    "plugins": (
        "move the listener to another plugin generation (N, latest or follow), without a restart",
        "Move a listener to another generation of the preprocessor plugins (docs/plugins.md, \"Pinning and a "
        "canary\"): N pins it to generation N, which must still be loaded (one some listener runs); latest pins "
        "it to the promoted generation, the one listeners that follow reloads run; follow lets it take every "
        "reload again. Its next unit of work takes the new generation's chain; units of work in flight finish "
        "on the one they started with. A canary listener (plugins_canary) cannot be moved. In effect when the "
        "bridge answers; a restart applies the configured plugins key again.",
        "  mqbridge listener plugins --config /etc/mqbridge/bridge.toml /queue/payments latest\n"
        "  mqbridge listener plugins -c bridge.toml /queue/payments 3        # back to generation 3\n"
        "  mqbridge listener plugins -c bridge.toml /queue/payments follow   # take every reload again"),
}

NAME_HELP = "the listener: its queue as configured, or SOURCE:QUEUE when two sources share the queue name"
COMMON = ("The state lives in the running process: a reload (SIGHUP) keeps it, a restart starts every "
          "listener running with its configured threads. The endpoint, TLS and token are those of "
          "--config's [monitoring] (or --url with --cacert and --token-file), as for `mqbridge status`; the "
          "bridge must have a [monitoring] token.")


def add_parser(sub: Any) -> None:
    """Add `listener` and its actions to the subparsers `sub`."""
    listener = sub.add_parser("listener", help="pause, resume, stop or start a running bridge's listener, "
                                               "change its thread count or move its plugin generation",
                              **parser_help("listener"))
    actions = listener.add_subparsers(dest="action", required=True, metavar="ACTION")
    for action, (short, description, examples) in ACTIONS.items():
        parser = actions.add_parser(action, help=short, description=textwrap.fill(f"{description} {COMMON}", 90),
                                    epilog=f"example:\n{examples}\n\n{EXIT_CODES}",
                                    formatter_class=argparse.RawDescriptionHelpFormatter)
        parser.add_argument("name", metavar="NAME", help=NAME_HELP)
        if action == "threads":
            parser.add_argument("count", type=int, metavar="N", help="the thread count, 1 to 64")
        if action == "plugins":
            parser.add_argument("to", metavar="N|latest|follow",
                                help="a plugin generation still loaded, latest (pinned to the promoted one) or "
                                     "follow (every reload)")
        add_endpoint_options(parser)
        parser.add_argument("--wait", type=duration, default=60.0, metavar="DURATION",
                            help="wait this long for the command to be in effect (default 60s; 0: do not wait)")
        parser.set_defaults(handler=cmd_listener)


def cmd_listener(args: argparse.Namespace) -> int:
    try:
        url, credentials = endpoint(args)
    except EndpointError as exc:
        print(f"mqbridge listener {args.action}: {exc}", file=sys.stderr)
        return exc.code
    argument = args.to if args.action == "plugins" else getattr(args, "count", None)
    code, text = run_command(url, args.name, args.action, argument, wait=args.wait,
                             timeout=args.timeout, credentials=credentials)
    print(text, file=sys.stdout if code in (EXIT_DONE, EXIT_NOT_IN_EFFECT) else sys.stderr)
    return code
