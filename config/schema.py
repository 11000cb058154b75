"""Typed configuration models (TOML contract v1); the sources are in `config.sources`.

Every model forbids unknown keys. Durations are seconds (float), sizes are bytes (int). Relative
paths are kept as written; `BridgeConfig.resolve_path` makes them relative to the file's directory.
Cross-key rules that need the whole file (a listener's source and type exist...) live in
`BridgeConfig`; they raise `KeyedError` so the loader can name the exact key of each problem.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, PrivateAttr, SecretStr, field_validator, model_validator

from mqbridge.config.base import (
    Duration,
    Model,
    Size,
    check_table,
    parse_duration,
    parse_size,
)
from mqbridge.config.collector import CollectorSection
from mqbridge.config.compaction import CompactionSection
from mqbridge.config.listener_rules import IDENTITY_RULES, resolve_identity, selector_problems
from mqbridge.config.monitoring import MonitoringSection
from mqbridge.config.plaintext import ledger_problem
from mqbridge.config.results import results_to_problems
from mqbridge.config.sources import MqSourceConfig, SourceConfig, StompSourceConfig
from mqbridge.config.tables import is_template, render, template_problem
from mqbridge.errors import ConfigError, KeyedError, Loc

#: The plugin folders when `[bridge] plugin_dirs` is not set (None); unlike a configured folder,
#: this one may be missing.
DEFAULT_PLUGIN_DIRS = (Path("preprocessors"),)

#: A message type name: it starts every bulk id (`mqbridge.message.new_bulk_id`), a file name.
_TYPE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


class BridgeSection(Model):
    """`[bridge]`: identity, supervision timing and local directories."""

    name: str = Field(default="mqbridge", min_length=1, description="Bridge name, used in client ids and status")
    control_interval: Duration = Field(default=parse_duration("5s"), gt=0, description="Control thread wake-up period")
    backlog_interval: Duration = Field(default=parse_duration("30s"), ge=0, description="How often each listener's "
                                       "queue depth is read, on a connection of its own; 0 disables")
    shutdown_timeout: Duration = Field(default=parse_duration("30s"), gt=0, description="Graceful shutdown deadline")
    plugin_dirs: list[Path] | None = Field(
        default=None, description="Drop-in preprocessor directories (hot-reloaded); None: "
                                  "DEFAULT_PLUGIN_DIRS (preprocessors), which may be missing")
    max_rss: Size | None = Field(default=None, gt=0, description="Resident memory guard in bytes; None: no guard")
    state_dir: Path = Field(default=Path("state"),
                            description="Directory of local state (the landing ledger); "
                                        "the systemd unit makes it writable and its working directory")
    exactly_once: bool = Field(default=True, description="true: land through the ledger, no duplicates; false: no "
                                                         "ledger, at-least-once; readers must de-duplicate")
    dedupe_window: Duration = Field(default=parse_duration("7d"), gt=0, description="How long the ledger "
                                    "remembers landed identities (a redelivery later than this lands again)")


class LedgerSection(Model):
    """`[ledger]`: where the landing ledger lives when it is not the embedded SQLite file under
    `[bridge] state_dir` — a PostgreSQL database shared by bridges on several hosts."""

    url: SecretStr | None = Field(default=None, description='PostgreSQL URL "postgresql://user:pass@host:5432/db" '
                                  "(use ${ENV:...} or ${FILE:...} for the password); None: SQLite under state_dir")
    database_schema: str = Field(default="mqbridge", pattern=r"^[a-z_][a-z0-9_]{0,62}$",
                                 description="PostgreSQL schema holding the ledger's tables (created on first use)")
    lease: Duration = Field(default=parse_duration("60s"), gt=0, description="A bridge on another host whose "
                            "heartbeat is older than this is taken for dead: its prepared bulks are finished by others")
    allow_plaintext_password: bool = Field(default=False, description="Accept a password in `url` without TLS "
                                           "(sslmode absent, disable, allow or prefer) to a host that is not loopback")

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not value.get_secret_value().startswith(("postgresql://", "postgres://")):
            raise ValueError("a ledger URL starts with postgresql:// (e.g. postgresql://bridge@db:5432/mqbridge)")
        return value

    @model_validator(mode="after")
    def _check_plaintext(self) -> LedgerSection:
        problem = ledger_problem(self.url.get_secret_value(), self.allow_plaintext_password) if self.url else None
        if problem:
            raise KeyedError([(("url",), problem)])
        return self


class LoggingSection(Model):
    """`[logging]`: level, format and optional rotating file."""

    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(default="INFO", description="Log level (any case)")
    format: Literal["text", "json"] = Field(default="text", description="Line format: text or json")
    file: Path | None = Field(default=None, description="Log file (rotated); None: standard error")
    max_bytes: Size = Field(default=parse_size("50MB"), description="Rotate the log file at this size")
    backup_count: int = Field(default=5, ge=0, description="Rotated log files to keep")

    @field_validator("level", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value


#: The password of a URL "scheme://user:password@host…".
_URL_PASSWORD = re.compile(r"^[a-z]+://[^:/@]*:([^@/]+)@")
#: A Spark Connect URL's parameters: sc://host:port/;token=…;user_id=… (names are case-insensitive).
_REMOTE_PARAM = re.compile(r";([^;=/]+)=([^;]*)")
#: A whole Spark Connect URL: sc://host[:port][/][;name=value...] (pyspark's ChannelBuilder grammar).
_REMOTE = re.compile(r"sc://(\[[0-9A-Fa-f:.]+\]|[^\s/:;\[\]]+)(:\d{1,5})?/?(;[^\s;=/]+=[^\s;]*)*;?")
#: Parameters of a Spark Connect URL that are credentials.
_REMOTE_SECRETS = frozenset({"token"})
#: spark.conf keys whose values are secrets wherever they came from: Spark's default `spark.redaction.regex`
#: ((?i)secret|password|token|access[.]?key) and `credential`.
SECRET_CONF_KEY = re.compile(r"secret|password|token|credential|access\.?key", re.IGNORECASE)


def remote_secrets(remote: str) -> list[str]:
    """The credential values (`token`) in a Spark Connect URL."""
    return [value for name, value in _REMOTE_PARAM.findall(remote) if name.strip().lower() in _REMOTE_SECRETS and value]


def shown_remote(remote: str) -> str:
    """A Spark Connect URL with its credential parameters replaced by `***`."""
    return _REMOTE_PARAM.sub(
        lambda m: f";{m[1]}=***" if m[1].strip().lower() in _REMOTE_SECRETS and m[2] else m[0], remote)


class SparkSection(Model):
    """`[spark]`: where Spark runs and where tables land."""

    master: str = Field(default="local[*]", description="Spark master: local[*], spark://host:7077, yarn, k8s://...")
    remote: str | None = Field(default=None, description="Spark Connect URL sc://host:15002 instead of a driver")
    warehouse: Path = Field(default=Path("data/landing"), description="Root directory of landed tables")
    app_name: str = Field(default="mqbridge", description="Spark application name")
    conf: dict[str, str] = Field(default_factory=dict, description="Extra Spark settings (values as strings)")
    catalog: bool = Field(default=False, description="Register each landed table in the session's catalog "
                          "(the one `conf` configures, e.g. a Hive metastore) so it is read by name")
    writer: Literal["auto", "arrow", "spark"] = Field(
        default="spark", description="Who writes the Parquet files of a type without `schema`: `spark` (a Spark "
        "job reads, sorts and writes every bulk: the data pipeline runs on Spark), `arrow` (pyarrow, in the "
        "bridge's process, bypassing Spark), `auto` (arrow, except with `remote` or a compression codec pyarrow "
        "does not write); a type with `schema` is always written by Spark")
    write_timeout: Duration = Field(default=parse_duration("10m"), gt=0, description="A bulk or probe write running "
                                    "longer is cancelled (its Spark job group) and counts as an outage of the sink")
    probe_interval_max: Duration = Field(default=parse_duration("1m"), gt=0, description="Longest wait between two "
                                         "probe writes of an unavailable sink (the wait doubles from 1s up to this)")
    until_idle_outage_limit: Duration = Field(default=parse_duration("10m"), gt=0, description="`run --until-idle` "
                                              "ends with exit code 1 once a sink has been unavailable this long")

    @property
    def shown(self) -> str:
        """Where Spark runs, as status pages and logs may show it: the master, or the Spark
        Connect URL with its `token` parameter redacted."""
        return shown_remote(self.remote) if self.remote else self.master

    @property
    def mode(self) -> Literal["connect", "local", "cluster"]:
        """How the bridge reaches Spark, for a reader of the status page: a Spark Connect server
        (`remote`), a driver with executors in its own JVM (`local[...]` master), or a cluster master."""
        if self.remote:
            return "connect"
        return "local" if self.master.startswith("local") else "cluster"

    @field_validator("remote")
    @classmethod
    def _check_remote(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("sc://"):
            raise ValueError("a Spark Connect URL starts with sc:// (e.g. sc://host:15002)")
        if value is not None and not _REMOTE.fullmatch(value):
            # pyspark would refuse it only when the bridge starts Spark, after the listeners are built.
            raise ValueError(f"{shown_remote(value)!r} is not a Spark Connect URL: write sc://HOST:PORT with no "
                             "spaces, then optional /;name=value parameters (e.g. sc://spark-host:15002/;use_ssl=true)")
        return value

    @field_validator("conf", mode="before")
    @classmethod
    def _conf_as_strings(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        out = {}
        for key, item in value.items():
            if isinstance(item, bool):
                out[key] = "true" if item else "false"  # Spark's spelling, not Python's
            elif isinstance(item, (int, float, str)):
                out[key] = str(item)
            else:
                raise KeyedError([((key,), "must be a string, number or boolean")])
        return out


class TypeConfig(Model):
    """`[types.<name>]`: one message type, its flush rules and its table."""

    bulk_size: Size = Field(default=parse_size("5MB"), gt=0, description="Flush a bulk at this many bytes")
    bulk_timeout: Duration = Field(default=parse_duration("60s"), gt=0, description="Flush a bulk this old")
    latency: Duration = Field(default=parse_duration("1s"), gt=0,
                              description="Latency target: the longest a message waits between its receipt and "
                                          "its bulk's write starting; bulks are sized from the measured write costs "
                                          "to keep up with the intake within it")
    table: str = Field(default="", description="Directory under the warehouse, or a template such as "
                                               "\"{source}_{destination}\" (config.tables); empty: the type's name")
    format: Literal["raw", "json"] = Field(default="raw", description="raw bodies, or json parsed with `schema`")
    schema_ddl: str | None = Field(default=None, alias="schema", description="Spark DDL of the JSON body (format json)")
    retention: Duration | None = Field(default=None, gt=0, description="Rows whose put_timestamp is older than "
                                       "this are designated by `mqbridge purge`; None: kept until purged by hand")
    results_to: str | None = Field(default=None, min_length=1, description="Also send each final result (landed, "
                                   "moved) here, in the unit of work: a STOMP destination or an IBM MQ queue")
    _name: str = PrivateAttr("")

    @field_validator("table")
    @classmethod
    def _check_table(cls, value: str) -> str:
        if value and is_template(value):
            problem = template_problem(value)
            if problem:
                raise ValueError(problem)
            check_table(render(value, source="s", destination="d", message_type="t"), written=value)
        elif value:
            check_table(value)
        return value

    @field_validator("schema_ddl")
    @classmethod
    def _blank_is_none(cls, value: str | None) -> str | None:
        return value if value and value.strip() else None

    @model_validator(mode="after")
    def _format_and_schema(self) -> TypeConfig:
        if self.format == "json" and self.schema_ddl is None:
            raise KeyedError([(("schema",), 'format = "json" needs a schema (Spark DDL, e.g. '
                                             '"order_id STRING, amount DECIMAL(12,2)")')])
        if self.format == "raw" and self.schema_ddl is not None:
            raise KeyedError([(("schema",), 'a schema is only used with format = "json"')])
        return self

    @property
    def table_name(self) -> str:
        """The table directory: `table`, or the type's name when not set."""
        return self.table or self._name


class PurgeSection(Model):
    """`[purge]`: the purge cost model's starting values and margin (docs/operations.md "Retention and purge")."""

    delete_row_seconds: float | None = Field(default=None, gt=0, description="Seconds per row rewritten by "
                                             "delete; None: learned from past runs (state_dir)")
    copy_row_seconds: float | None = Field(default=None, gt=0, description="Seconds per surviving row copied; "
                                           "None: learned")
    container_seconds: float | None = Field(default=None, ge=0, description="Seconds to create a container, "
                                            "swap it in and drop the old one; None: learned")
    interval: Duration | None = Field(default=None, gt=0, description="Run every type's retention on the "
                                      "bridge's own thread this often; None (default): only `mqbridge purge`")
    margin: float = Field(default=0.1, ge=0, description="Copy-and-drop is chosen only when its estimate plus "
                                                          "this fraction is below delete's")
    threshold: float = Field(default=0.5, ge=0, lt=1, description="The scheduled retention purges a container "
                             "only when more than this fraction of its rows is designated (default: more "
                             "designated than not); a container whose rows are all designated is always dropped")


#: Deliveries before a message is moved aside, where neither the listener nor the queue says.
DEFAULT_BACKOUT_THRESHOLD = 3
#: Failures of one message, with no backout threshold to move it, before its listener halts.
DEFAULT_HALT_AFTER_FAILURES = 10


class PreprocessorRef(Model):
    """One step of a listener's chain. In TOML: `"name"` or `{name = "...", <option> = ...}`."""

    name: str = Field(min_length=1, description="Registered preprocessor name")
    options: dict[str, Any] = Field(default_factory=dict, description="Options of the preprocessor")


def _preprocessors_from_toml(value: Any) -> Any:
    """TOML items (a name, or a table whose keys other than `name` are options) as PreprocessorRefs."""
    if not isinstance(value, list):
        return value
    out: list[Any] = []
    for index, item in enumerate(value):
        if isinstance(item, str):
            out.append({"name": item})
        elif isinstance(item, dict):
            options = {k: v for k, v in item.items() if k != "name"}
            out.append({"name": item["name"], "options": options} if "name" in item else {"options": options})
        elif isinstance(item, PreprocessorRef):
            out.append(item)
        else:
            raise KeyedError([((index,), 'a preprocessor is a name or a table {name = "...", <options>}')])
    return out


class ListenerConfig(Model):
    """`[[listeners]]`: listener threads on one queue of one source."""

    source: str = Field(min_length=1, description="Name of a [sources.<name>] entry")
    queue: str = Field(min_length=1, description="Queue (STOMP destination or MQ queue name)")
    threads: int = Field(default=1, ge=1, le=64, description="Listener threads on this queue")
    batch: int = Field(default=500, ge=1, le=100_000, description="Maximum messages per unit of work")
    in_flight: int = Field(default=2, ge=1, le=16, description="Units of work one listener thread holds at once, "
                           "each on a source connection of its own: it reads the next while Spark writes the "
                           "bulk holding the earlier ones (connections to the broker: threads x in_flight)")
    wait: Duration = Field(default=parse_duration("1s"), description="Maximum wait to fill a batch")
    message_type: str = Field(min_length=1, description="Default message type (a [types.<name>] entry)")
    preprocessors: Annotated[list[PreprocessorRef], BeforeValidator(_preprocessors_from_toml)] = Field(
        default_factory=list, description="Ordered preprocessor chain")
    backout_threshold: int | None = Field(
        default=None, ge=0, description="Deliveries before a message is moved to the backout queue; 0 disables; "
                                        f"unset: {DEFAULT_BACKOUT_THRESHOLD} (IBM MQ: the queue's BOTHRESH)")
    backout_queue: str | None = Field(default=None, description="Where poison messages go; MQ: None uses BOQNAME")
    halt_after_failures: int = Field(
        default=DEFAULT_HALT_AFTER_FAILURES, ge=1,
        description="With no backout threshold (backout_threshold = 0, IBM MQ BOTHRESH(0)): a message that "
                    "failed this many times halts its listener (critical log, /healthz 503) instead of looping")
    prefetch: int | None = Field(default=None, ge=1, description="STOMP prefetch; None: batch")
    confirm: Literal["off", "reply-to"] = Field(
        default="off", description="STOMP: `reply-to` sends a message with a `reply-to` header a result message "
        "(landed or backout) in the commit's transaction; IBM MQ answers the MQMD Report options instead")
    reply_to_allow: list[Annotated[str, Field(min_length=1)]] | None = Field(
        default=None, description="Glob patterns of the reply-to destinations results may go to (IBM MQ: QMGR/QUEUE, "
        "or QUEUE on the connected queue manager); None: STOMP any, IBM MQ the connected queue manager only")
    selector: str | None = Field(default=None, description="Only messages matching this JMS selector (\"region = "
                                 "'EU'\"): ActiveMQ/Artemis, IBM MQ (SelectionString); None: every message")
    outbox_allow: list[Annotated[str, Field(min_length=1)]] | None = Field(
        default=None, description="Glob patterns of the destinations its preprocessors may emit derived messages to "
        "(mqbridge.emit; STOMP destination or IBM MQ queue); None: emitting is refused")
    identity: str = Field(default="auto", description="What recognises a redelivered message: msg_id, "
                          "stamp (STOMP: the bridge stamps a copy of each message with an id first), "
                          "header:NAME (a producer's id), body-sha256; auto: stamp on RabbitMQ, else msg_id")

    @field_validator("identity")
    @classmethod
    def _check_identity(cls, value: str) -> str:
        if value in IDENTITY_RULES or (value.startswith("header:") and value[len("header:"):].strip()):
            return value
        raise ValueError(f"{value!r} is not an identity rule (auto, msg_id, stamp, header:NAME or body-sha256)")


class BridgeConfig(Model):
    """The whole configuration file. `path` and `base_dir` are set by the loader, not by TOML."""

    bridge: BridgeSection = Field(default_factory=BridgeSection, description="Identity and supervision")
    monitoring: MonitoringSection = Field(default_factory=MonitoringSection, description="HTTP endpoint")
    logging: LoggingSection = Field(default_factory=LoggingSection, description="Logging")
    spark: SparkSection = Field(default_factory=SparkSection, description="Spark and the warehouse")
    collector: CollectorSection = Field(default_factory=CollectorSection, description="Collector limits")
    ledger: LedgerSection = Field(default_factory=LedgerSection, description="Where the landing ledger lives")
    purge: PurgeSection = Field(default_factory=PurgeSection, description="Purge cost model")
    compaction: CompactionSection = Field(default_factory=CompactionSection, description="Container compaction")
    types: dict[str, TypeConfig] = Field(min_length=1, description="Message types by name")
    sources: dict[str, SourceConfig] = Field(min_length=1, description="Sources by name")
    listeners: list[ListenerConfig] = Field(min_length=1, description="Listener entries")
    _path: Path | None = PrivateAttr(None)
    _base_dir: Path | None = PrivateAttr(None)
    #: The spark.conf keys whose values came from `${ENV:}`/`${FILE:}` (set by the loader).
    _referenced_conf: frozenset[str] = PrivateAttr(frozenset())
    #: Secret references left unresolved (`load_config(secrets=False)`): key path -> why.
    _unresolved: dict[str, str] = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _cross_check(self) -> BridgeConfig:
        problems: list[tuple[Loc, str]] = []
        for name, type_cfg in self.types.items():
            type_cfg._name = name
            if not _TYPE_NAME.fullmatch(name):
                # Every bulk id starts with its type's name and names a staging directory.
                problems.append((("types", name), "a type name is letters, digits, '.', '_' and '-', starting "
                                 "with a letter or digit (it names bulks and their staging directories)"))
                continue
            if not type_cfg.table:
                try:
                    check_table(name)
                except ValueError:
                    problems.append((("types", name), "the type name cannot be a table directory; set table"))
                else:
                    type_cfg.table = name
        seen: dict[tuple[str, str, str], int] = {}
        for index, listener in enumerate(self.listeners):
            where: Loc = ("listeners", index)
            source = self.sources.get(listener.source)
            if source is None:
                problems.append(((*where, "source"), f"unknown source {listener.source!r} "
                                                     f"(configured: {', '.join(self.sources)})"))
            if listener.message_type not in self.types:
                problems.append(((*where, "message_type"), f"unknown message type {listener.message_type!r} "
                                                           f"(configured: {', '.join(self.types)})"))
            # Sources whose listener loop counts deliveries need a queue to move poison messages to.
            if source is not None and source.kind in ("stomp", "memory") and listener.backout_threshold != 0 \
                    and not listener.backout_queue:
                problems.append(((*where, "backout_queue"), f"required for a {source.kind} source when "
                                                            "backout_threshold > 0 (or set backout_threshold = 0)"))
            if listener.confirm != "off" and source is not None:
                if source.kind != "stomp":
                    problems.append(((*where, "confirm"), f"only for STOMP sources; a {source.kind} source "
                                     + ("answers each message's MQMD Report options (MQRO_PAN, MQRO_NAN) itself"
                                        if source.kind == "mq" else "has no reply-to")))
                elif getattr(source, "commit_mode", None) == "receipted":
                    problems.append(((*where, "confirm"), "needs commit_mode = \"transactional\": a result sent "
                                     "outside the ACKs' transaction could be sent twice for one message"))
            if listener.reply_to_allow is not None and source is not None and source.kind != "mq" \
                    and listener.confirm == "off":
                problems.append(((*where, "reply_to_allow"), 'only used with confirm = "reply-to" (STOMP) or by an '
                                                             "IBM MQ source's reports"))
            # MQ_Q_NAME_LENGTH: an IBM MQ queue name is 1 to 48 bytes (the queue manager would say 2085).
            if source is not None and source.kind == "mq" and len(listener.queue.encode()) > 48:
                problems.append(((*where, "queue"), f"{listener.queue!r} is longer than 48 bytes, the longest "
                                                    "IBM MQ queue name"))
            problems.extend(resolve_identity(listener, source, where))
            problems.extend(selector_problems(listener.selector, source, where))
            # Listeners with different selectors may share a queue: each takes its own messages.
            first = seen.setdefault((listener.source, listener.queue, listener.selector or ""), index)
            if first != index:
                problems.append((where, f"same source, queue and selector as listeners[{first}]; raise its threads"))
            # They share one name (source:queue) for control, counters and metrics: one thread count.
            sharing = next((i for i, o in enumerate(self.listeners[:index]) if (o.source, o.queue) ==
                            (listener.source, listener.queue) and o.threads != listener.threads), None)
            if sharing is not None:
                problems.append(((*where, "threads"), f"must equal listeners[{sharing}].threads: listeners on one "
                                 "queue share its name (source:queue) for control, counters and metrics"))
        problems.extend(results_to_problems(self.types, self.sources, self.listeners))
        if problems:
            raise KeyedError(problems)
        return self

    @property
    def path(self) -> Path | None:
        """The file this configuration was loaded from, or None for text without a file."""
        return self._path

    @property
    def base_dir(self) -> Path:
        """Directory that relative paths are relative to: the file's directory, else the cwd."""
        return self._base_dir if self._base_dir is not None else Path.cwd()

    def resolve_path(self, path: Path | str) -> Path:
        """`path` made absolute: `~` expanded, relative paths taken from `base_dir`, `..` folded
        (`config/../data` is shown and used as `data`)."""
        path = Path(path).expanduser()
        return Path(os.path.normpath(path if path.is_absolute() else self.base_dir / path))

    @property
    def unresolved(self) -> dict[str, str]:
        """The secret references loaded without their values (key path -> why): a command that
        needs one of them calls `require_resolved` first."""
        return dict(self._unresolved)

    def require_resolved(self, *prefixes: str) -> None:
        """Raise ConfigError naming the first unresolved reference under one of the key paths
        `prefixes` (all when none is given): the command needs that value after all."""
        for key, why in self._unresolved.items():
            if not prefixes or any(key == p or key.startswith((f"{p}.", f"{p}[")) for p in prefixes):
                raise ConfigError(f"{self._path or '<string>'}: {key}: {why} (this command needs it)")

    def secrets(self) -> dict[str, str]:
        """The plain text of every secret, by key path ("sources.amq.password"): for redaction
        (`mqbridge.logsetup`) and change detection (`mqbridge.reload`) only, never for output."""
        found: dict[str, str] = {}
        for name, source in self.sources.items():
            if isinstance(source, (StompSourceConfig, MqSourceConfig)) and source.password is not None:
                found[f"sources.{name}.password"] = source.password.get_secret_value()
        if self.ledger.url is not None:
            url = self.ledger.url.get_secret_value()
            found["ledger.url"] = url
            password = _URL_PASSWORD.search(url)
            if password:
                found["ledger.url.password"] = password[1]
        for n, token in enumerate(remote_secrets(self.spark.remote or "")):
            found[f"spark.remote.token[{n}]"] = token
        if self.monitoring.token is not None:
            found["monitoring.token"] = self.monitoring.token.get_secret_value()
        for key in self.secret_conf_keys():
            found[f'spark.conf."{key}"'] = self.spark.conf[key]
        return found

    def secret_conf_keys(self) -> frozenset[str]:
        """The `[spark.conf]` keys whose values are secrets: a value read from `${ENV:}`/`${FILE:}`
        is kept out of files for a reason; a key named like a credential (Spark's own
        `spark.redaction.regex` idea) is one whatever its origin. They never go on a command line
        (`mqbridge.landing.jvm`)."""
        return frozenset(key for key in self.spark.conf
                         if key in self._referenced_conf or SECRET_CONF_KEY.search(key))
