"""Each subcommand's `--help`: what it is for, an example, and its exit codes.

Kept apart from the parsers so each command's module reads as its options and its handler, and so
the exit codes a script may rely on are written down in one place.
"""

from __future__ import annotations

import argparse
import textwrap
from typing import Any

_HELP: dict[str, tuple[str, str]] = {
    "follow": (
        "Tail the tables of the configuration's [[forwards]] and send every row landed there on to each "
        "forward's destinations (to), chosen by the row's table (its type), the queue the bridge read it from "
        "(senders) and a Spark SQL condition (where). New bulks are found in the landing ledger; their rows are "
        "sent as a replay sends them (mqbridge-replay-id names the forward's destination, mqbridge-replay-key "
        "the row), in units of work of the forward's batch, each with a marker. The follow ledger in state_dir "
        "(follow.sqlite3) records what each destination was sent, so a killed follow resumes without a row "
        "twice or skipped. An outage (broker, Spark, ledger) or a destination refusing a row ends a pass; the "
        "next, after a wait that doubles up to 60s, sends again. Runs until SIGTERM or SIGINT.",
        """example:
  mqbridge follow --config /etc/mqbridge/bridge.toml
  mqbridge follow -c bridge.toml --forward orders-to-billing --until-idle 30s

exit codes:
  0  stopped by a signal, or idle for --until-idle
  1  could not start: Spark, or the landing ledger (a failure while running is retried, not an exit)
  2  configuration error: no [[forwards]], no such forward, no landing ledger yet, a source kind that
     cannot be sent to"""),
    "replay": (
        "Send landed rows of a table back to a queue as messages: body byte-exact, the row's headers and "
        "correlation id, plus mqbridge-replay-id, mqbridge-replay-key and mqbridge-replayed-message-id. Rows "
        "are read through Spark in put_timestamp order and sent in units of work of --batch rows (STOMP: one "
        "transaction each, with a marker message on /queue/mqbridge.replay.ID; IBM MQ: one unit of work each, "
        "with a marker on the source's replay_marker_queue, rows keeping MsgId, CorrelId and Format). The replay "
        "ledger in state_dir records each row sent per replay id, so running the same command again after a "
        "kill resumes without sending any row twice. Before sending, the replay refuses a destination that does "
        "not exist (RabbitMQ /amq/queue/NAME, an IBM MQ queue) and rows that a listener of the configuration "
        "reading the destination would drop as already landed (their identities are in the landing ledger); "
        "--new-identity gives the replayed messages new identities so that they land again.",
        """example:
  mqbridge replay --config /etc/mqbridge/bridge.toml --table orders --to /queue/orders.replay
  mqbridge replay -c bridge.toml --table orders --newer-than 2h --where "headers['x-app'] = 'shop'" \\
      --to /queue/orders --source amq
  mqbridge replay -c bridge.toml --table orders --to ORDERS.REPLAY --source qm   # an IBM MQ queue

exit codes:
  0  every selected row is sent (by this run or an earlier one of the same replay id)
  1  the broker or Spark failed, or a commit is in doubt: run the same command again; or refused: rows the
     bridge would drop as already landed (nothing sent; --new-identity lands them again)
  2  configuration error: no such table, source or destination, --source missing, a source kind replay
     cannot send to"""),
    "redrive": (
        "Move messages from a listener's backout queue back to the queue it reads, in units of work of "
        "--batch messages, each a copy that keeps the identity the landing ledger knows it by: a message "
        "that had in fact landed is recognised and committed without landing twice. Its delivery count "
        "starts again; why it was moved is kept in the header mqbridge-redriven-reason. STOMP: one "
        "transaction per unit (never NACK); IBM MQ: under syncpoint. Killed at any point, nothing is lost "
        "or duplicated: run it again. Run it while the bridge runs or not.",
        """example:
  mqbridge redrive --config /etc/mqbridge/bridge.toml --listener /queue/orders --dry-run
  mqbridge redrive -c bridge.toml --listener amq:/queue/orders --limit 100

exit codes:
  0  moved (or listed) what there was; the counts are printed
  1  the broker could not be reached, refused a frame, or a commit is in doubt (run it again)
  2  configuration error: no such listener, no backout queue, a source kind without re-drive"""),
    "run": (
        "Run the bridge: read messages from the configured sources and land them in Spark tables, exactly "
        "once, until stopped (SIGINT/SIGTERM; a second one exits at once) or, with --until-idle, until "
        "every listener has been idle that long.",
        """example:
  mqbridge run --config /etc/mqbridge/bridge.toml --log-level DEBUG
  mqbridge run -c bridge.toml --until-idle 30s

exit codes:
  0  stopped, or idle with every message committed
  1  not drained, or a listener halted
  2  configuration error (the message names the file and the key)"""),
    "jars": (
        "Fetch the Java libraries (jars) that a table format needs in Spark into [spark] jars_dir (or --dir), "
        "each from a Maven repository over HTTPS and checked against its published SHA-1: the delta set is "
        "Delta Lake for Spark 4.1 (`table_format = \"delta\"`). `run` hands them to its own Spark driver; a "
        "Spark Connect server or cluster must be started with them. On a host without internet, run it where "
        "there is and copy the folder, or name a mirror with --repository.",
        """example:
  mqbridge jars --config /etc/mqbridge/bridge.toml        # into its [spark] jars_dir/delta
  mqbridge jars --dir /opt/mqbridge/jars delta --repository https://mirror.example/maven2

exit codes:
  0  every jar is there and matches its checksum
  1  a jar could not be fetched, or did not match its checksum (nothing of it kept)
  2  configuration error"""),
    "spark-archive": (
        "Make the class-data archive of the bridge's in-process Spark driver JVM in state_dir: a JVM that "
        "maps it starts and writes its first bulk in about half the time. Run it after installing or "
        "upgrading (pyspark or Java: the archive of another version is not used, and removed here), as "
        "the user the bridge runs as; it takes tens of seconds and writes about 170 MB. Not for Spark "
        "Connect ([spark] remote): that JVM is the server's.",
        """example:
  mqbridge spark-archive --config /etc/mqbridge/bridge.toml    # as the user the bridge runs as

exit codes:
  0  archive written (its path and size are printed)
  1  Spark could not start, or the JVM wrote no archive
  2  configuration error, or [spark] remote is set"""),
    "check-config": (
        "Check a configuration file for everything `run` would refuse or warn about, without contacting "
        "a broker or starting Spark: unknown keys (with the nearest known one), values, formats (MQ "
        "conn_name, Spark Connect URL, schema DDL), directories this user must write, files it must read, "
        "the drivers the sources need, plugins and preprocessor chains, and the warnings `run` gives at "
        "start. One problem per line: FILE:LINE: KEY: problem — what to write instead.",
        """example:
  mqbridge check-config --config bridge.toml
  mqbridge check-config --strict bridge.toml      # in CI: warnings fail too

exit codes:
  0  nothing `run` would refuse (warnings are listed; with --strict there are none)
  1  problems found (with --strict: warnings too)
  2  the file cannot be read or is not TOML"""),
    "tables": (
        "List each type's table under the warehouse and its containers (put_date partitions): rows, "
        "size, files, oldest and newest put_timestamp, read from the Parquet footers. Needs no secrets "
        "and no Spark. `mqbridge tables delete` deletes a type's rows by identity or SQL (see its --help).",
        """example:
  mqbridge tables --config bridge.toml
  mqbridge tables delete --config bridge.toml --type orders --identity ID-1 --reason "erasure request"

exit codes:
  0  listed
  2  configuration error"""),
    "purge": (
        "Remove designated rows (older than a retention or --older-than, or matching --where) from each "
        "container, by delete, copy-and-drop or drop, as the cost model says. Without --older-than and "
        "--where, a type's max_rows (its oldest rows beyond the cap) and then [purge] min_free_disk (the "
        "oldest rows of every type until the disk has that free) designate too, never a row younger than "
        "[purge] keep_younger_than. Starts a Spark session "
        "(local or the [spark] remote); --dry-run prints the plan and estimates and changes nothing.",
        """example:
  mqbridge purge --config bridge.toml --older-than 30d --dry-run
  mqbridge purge -c bridge.toml --type orders --where "amount < 0"

exit codes:
  0  done (or planned, with --dry-run)
  1  a purge failed
  2  configuration error (an unknown --type included)"""),
    "compact": (
        "Plan each container (put_date partition) of the configured tables and carry the plan out: drop, "
        "delete or copy-and-drop by the types' retention, or compact (merge small files into files of "
        "[compaction] target_file_size, sorted by put_timestamp across the container), as the purge's learned "
        "cost model says. The new container is swapped in under the table's lock while the bridge lands: "
        "readers see the old or the new one, bulks landed meanwhile are carried over. Killed, the next run "
        "(or bridge start) finishes or rolls it back. --dry-run prints the plan per container and changes nothing.",
        """example:
  mqbridge compact --config bridge.toml --dry-run
  mqbridge compact -c bridge.toml --table orders

exit codes:
  0  done (or planned, with --dry-run)
  1  a compaction or purge failed (the container stays as it was)
  2  configuration error (an unknown --table included)"""),
    "plugins": (
        "List the preprocessor plugins (built-in, installed, and the files of plugin_dirs), the "
        "preprocessors each registers, load errors, and each listener's chain. Needs no secrets.",
        """example:
  mqbridge plugins
  mqbridge plugins --config bridge.toml

exit codes:
  0  every plugin loaded and every chain built
  1  a plugin failed to load or a chain names an unknown preprocessor
  2  configuration error"""),
    "ledger": (
        "Show the landing ledger: bulks prepared and published, identities, size, oldest entry. The "
        "SQLite ledger is opened read-only (a running bridge is not disturbed); --verify checks that "
        "every published bulk's files are in place and hold one row per identity. --abandon BULK decides "
        "about a bulk that start-up could not roll forward because its files are gone (the start-up names "
        "it, and its table's sinks wait meanwhile): none of its rows in the table, it is forgotten (its "
        "messages were never committed and land again); all of them, it is recorded published; anything "
        "else, nothing changes. A running bridge picks the decision up by itself.",
        """example:
  mqbridge ledger --config bridge.toml --verify
  mqbridge ledger --config bridge.toml --abandon orders-3f2a9c1e-00000042

exit codes:
  0  shown (and verified), or the bulk abandoned
  1  no ledger file yet, --verify found missing files or wrong row counts, or --abandon refused
  2  configuration error"""),
    "status": (
        "Show a running bridge's health, listener threads (state, rate, commits, restarts, last error), "
        "collector, Spark, sinks, plugins, memory guard and process, from its monitoring endpoint. With "
        "--config, the endpoint, TLS and token of its [monitoring] (only the token is read of its "
        "secrets); with --url alone, --cacert and --token-file give the CA and the token.",
        """example:
  mqbridge status --config /etc/mqbridge/bridge.toml
  mqbridge status --url https://bridge1:9464 --cacert ca.pem --token-file monitoring.token

exit codes:
  0  healthy
  1  unhealthy (each problem is listed)
  2  configuration error (or options that do not go together)
  3  nothing answers at the endpoint, or it refused the request"""),
    "listener": (
        "Control a listener of a running bridge over its authenticated control plane (the monitoring "
        "endpoint, which must have a [monitoring] token): pause (finish the units of work in flight, take "
        "no new one, connections stay up), resume, stop (finish them, end the threads, close the "
        "connections), start, set its thread count, or move it to another plugin generation (plugins N, "
        "latest or follow), without a restart. NAME is the listener's queue as "
        "configured, or SOURCE:QUEUE when two sources share the queue name. Each ACTION waits until it is "
        "in effect; `mqbridge listener ACTION --help` says more. The state shows in /status, the status "
        "page and mqbridge_listener_state; a reload (SIGHUP) keeps it, a restart does not.",
        """example:
  mqbridge listener pause --config /etc/mqbridge/bridge.toml /queue/orders
  mqbridge listener resume --config /etc/mqbridge/bridge.toml /queue/orders
  mqbridge listener threads -c bridge.toml amq:/queue/orders 4
  mqbridge listener plugins -c bridge.toml /queue/payments latest
  mqbridge listener stop --url https://bridge1:9464 --cacert ca.pem --token-file monitoring.token ORDERS

exit codes:
  0  in effect (with --wait 0: accepted)
  1  the bridge refused it (no such listener, an ambiguous queue name, a bad thread count, a state
     that does not allow it)
  2  configuration error (or options that do not go together)
  3  nothing answers at the endpoint, or it refused the request (401, or 403: no [monitoring] token)
  4  accepted, but not in effect within --wait"""),
    "where": (
        "Say where a message is: in flight in the running bridge (which listener thread and unit, which "
        "bulk, since when), landed (table, put_date, bulk, when: from the landing ledger), moved to a backout "
        "queue (which, when, why: from the backout log in state_dir), or unknown. ID is the message id as the "
        "source gives it, or the identity the ledger knows it by (the listener's identity rule). It asks the "
        "running bridge's monitoring endpoint (GET /messages/ID, which needs the [monitoring] token), reached "
        "like `status`; with --config, when no bridge answers, it reads the ledger (read-only) and the backout "
        "log itself and says so. --json prints the answer as JSON.",
        """example:
  mqbridge where --config /etc/mqbridge/bridge.toml 'ID:broker-1-41385-1718031234567-1:1:1:1:42'
  mqbridge where --url https://bridge1:9464 --cacert ca.pem --token-file monitoring.token ORDER-1234 --json

exit codes:
  0  landed
  1  unknown: neither the running bridge, the ledger nor the backout log knows it
  2  configuration error (or options that do not go together, or an empty ID)
  3  no bridge answers and there is no --config to read the files of, or the endpoint refused the token
  4  in flight
  5  moved to a backout queue"""),
}


def parser_help(command: str) -> dict[str, Any]:
    """The `add_parser` keywords of `command`: description, epilog and a formatter that keeps the
    epilog's lines as written."""
    description, epilog = _HELP[command]
    # The raw formatter keeps the epilog's layout, so the description is wrapped here instead.
    return {"description": textwrap.fill(description, 90), "epilog": epilog,
            "formatter_class": argparse.RawDescriptionHelpFormatter}


def commands_with_help() -> list[str]:
    """The subcommands described here (the tests check each one's --help)."""
    return list(_HELP)
