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
from typing import Any, Literal

from pydantic import Field, PrivateAttr, SecretStr, field_validator, model_validator

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
from mqbridge.config.forwards import ForwardConfig, forward_problems
from mqbridge.config.iceberg import IcebergCatalog, IcebergSection, iceberg_problems
from mqbridge.config.listener import ListenerConfig, listener_problems  # ListenerConfig: also imported from here
from mqbridge.config.monitoring import MonitoringSection
from mqbridge.config.plaintext import is_loopback, ledger_problem
from mqbridge.config.results import results_to_problems
from mqbridge.config.sources import MqSourceConfig, SourceConfig, StompSourceConfig
from mqbridge.config.tables import mixed_format_problems, partition_problems
from mqbridge.config.types import TypeConfig as TypeConfig  # re-exported for `config.schema` importers
from mqbridge.config.warehouse import ObjectStoreUri, Warehouse, delta_rs_options, object_store_problems
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
    busy_timeout: Duration = Field(default=parse_duration("30s"), gt=0, description="The SQLite ledger (no url): "
                                   "how long a statement waits for another process's write lock before the ledger "
                                   "counts as unavailable (an outage: the messages go back and wait)")
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


def connect_plaintext_problem(remote: str | None, conf: dict[str, str]) -> str | None:
    """Why `remote` must not be sent `conf`: the bridge sets every `[spark.conf]` key on the Spark
    Connect server's session (`mqbridge.landing.session`), so a secret among them (`SECRET_CONF_KEY`:
    an S3 secret key, a password) would travel in clear to a server that is not this machine's
    loopback over a channel without TLS (no `use_ssl=true`, no `token`, which implies TLS). None
    when nothing secret is sent or the channel is safe."""
    match = _REMOTE.fullmatch(remote) if remote else None
    if match is None or is_loopback(match[1]):
        return None
    params = {name.strip().lower(): value.strip().lower() for name, value in _REMOTE_PARAM.findall(remote or "")}
    if params.get("use_ssl") == "true" or params.get("token"):
        return None
    secret = sorted(key for key in conf if SECRET_CONF_KEY.search(key))
    if not secret:
        return None
    return (f"the Spark Connect server {shown_remote(remote or '')} is not on this machine and the channel has no TLS, "
            f"but [spark.conf] holds {', '.join(secret)}, which the bridge sets on the server's session: the "
            "secret would travel in clear; add ;use_ssl=true to the URL (and give the server TLS), configure the "
            "secret on the server itself instead of here, or set [spark] allow_plaintext_password = true to "
            "accept the risk")


def shown_remote(remote: str) -> str:
    """A Spark Connect URL with its credential parameters replaced by `***`."""
    return _REMOTE_PARAM.sub(
        lambda m: f";{m[1]}=***" if m[1].strip().lower() in _REMOTE_SECRETS and m[2] else m[0], remote)


#: The table formats a type can land in (`[spark] table_format`, `[types.X] table_format`).
TableFormat = Literal["parquet", "delta", "iceberg"]


class SparkSection(Model):
    """`[spark]`: where Spark runs and where tables land."""

    master: str = Field(default="local[*]", description="Spark master: local[*], spark://host:7077, yarn, k8s://...")
    remote: str | None = Field(default=None, description="Spark Connect URL sc://host:15002 instead of a driver")
    warehouse: Warehouse = Field(default=Path("data/landing"), description="Where the tables land: a directory, "
                                 "or (Delta tables only) s3a://BUCKET[/PREFIX] or hdfs://NAMENODE[:PORT]/PATH "
                                 "(config.warehouse; docs/spark-and-tables.md, \"Object stores and HDFS\")")
    app_name: str = Field(default="mqbridge", description="Spark application name")
    conf: dict[str, str] = Field(default_factory=dict, description="Extra Spark settings (values as strings)")
    catalog: bool = Field(default=False, description="Register each landed table in the session's catalog "
                          "(the one `conf` configures, e.g. a Hive metastore) so it is read by name")
    writer: Literal["auto", "arrow", "spark"] = Field(
        default="spark", description="Who writes the Parquet files of a type without `schema`: `spark` (a Spark "
        "job reads, sorts and writes every bulk: the data pipeline runs on Spark), `arrow` (pyarrow, in the "
        "bridge's process, bypassing Spark's job), `auto` (arrow, except with `remote` or a compression codec "
        "pyarrow does not write); a type with `schema` is always written by Spark. A Delta table in a local "
        "warehouse takes pyarrow's files too, committed by Delta in the Spark driver with the statistics Delta's "
        "writer collects (a table with column mapping, constraints, generated columns or no "
        "`delta.dataSkippingStatsColumns` keeps the Spark job); on an object store or HDFS, and for Iceberg, "
        "Spark writes")
    write_timeout: Duration = Field(default=parse_duration("10m"), gt=0, description="A bulk or probe write running "
                                    "longer is cancelled (its Spark job group) and counts as an outage of the sink")
    probe_interval_max: Duration = Field(default=parse_duration("1m"), gt=0, description="Longest wait between two "
                                         "probe writes of an unavailable sink (the wait doubles from 1s up to this)")
    until_idle_outage_limit: Duration = Field(default=parse_duration("10m"), gt=0, description="`run --until-idle` "
                                              "ends with exit code 1 once a sink has been unavailable this long")
    table_format: TableFormat = Field(default="parquet", description="How a table is kept: `parquet` (a directory of "
                                      "Parquet files the bridge publishes by renames) or `delta` (a Delta Lake table, "
                                      "each bulk one commit of its own transaction log) or `iceberg` (an Apache "
                                      "Iceberg table of the `[spark.iceberg]` catalog, each bulk one snapshot); "
                                      "`[types.X] table_format` overrides it per type")
    class_archive: Literal["auto", "manual"] = Field(
        default="auto", description="The in-process driver JVM's class-data archive in `state_dir` (its starts "
        "take about half the time): `auto`, the bridge makes one itself when there is none for this pyspark and "
        "Java, in the background at the lowest CPU priority, `class_archive_after` after its driver started (the "
        "classes the driver loaded, dumped by a second JVM: about 40 CPU-seconds and 170 MB, once); `manual`, "
        "only `mqbridge spark-archive` makes one. Either way an archive there is mapped")
    class_archive_after: Duration = Field(default=parse_duration("10m"), gt=0, description="With `class_archive = "
                                          "\"auto\"`: how long after the driver started the bridge makes the archive "
                                          "(its writes have loaded their classes by then)")
    jars_dir: Path = Field(default=Path("jars"), description="Where the Java libraries of the table formats are "
                           "(`scripts/jars.sh` fetches them; the `delta` set under `<jars_dir>/delta`)")
    allow_plaintext_password: bool = Field(default=False, description="Accept S3 keys (fs.s3a.access.key, "
                                           "secret.key, session.token in `conf`) with an http:// endpoint that is not "
                                           "loopback (the landed messages and the signed requests travel in clear), "
                                           "and secret `conf` values sent to a Spark Connect `remote` that is not "
                                           "loopback without TLS (no use_ssl=true or token)")
    iceberg: IcebergSection = Field(default_factory=IcebergSection, description="The Iceberg catalog of the "
                                    "types with table_format = \"iceberg\" (config.iceberg)")

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

    @model_validator(mode="after")
    def _check_connect_plaintext(self) -> SparkSection:
        problem = connect_plaintext_problem(self.remote, self.conf) if not self.allow_plaintext_password else None
        if problem:
            raise KeyedError([(("remote",), problem)])
        return self

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
    vacuum_retention: Duration = Field(default=parse_duration("7d"), ge=0, description="Delta and Iceberg tables: "
                                       "after a purge or compaction, VACUUM (Delta) removes the files they dropped "
                                       "from the table this long ago (Delta's default 7d), expire_snapshots (Iceberg) "
                                       "the snapshots older than this, and remove_orphan_files the files no snapshot "
                                       "reads older than this or 24h, whichever is longer; time travel to a version "
                                       "or snapshot before a purge works until then")
    min_free_disk: Size | None = Field(default=None, gt=0, description="Free bytes the purge keeps on the "
                                       "warehouse's file system: below it, after the retentions and row caps, the "
                                       "oldest rows of every type purged are designated until enough is freed "
                                       "(a local warehouse only); None: not checked")
    keep_younger_than: Duration = Field(default=parse_duration("1d"), ge=0, description="Rows whose "
                                        "put_timestamp or received_timestamp is within this age are never "
                                        "designated by a row cap ([types.X] max_rows) or min_free_disk, so that a "
                                        "burst never purges fresh data (a retention designates by its own age)")


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
    forwards: list[ForwardConfig] = Field(default_factory=list,
                                          description="Tables `mqbridge follow` tails, sending new rows on")
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
        problems.extend(listener_problems(self.listeners, self.sources, self.types))
        problems.extend(results_to_problems(self.types, self.sources, self.listeners))
        problems.extend(object_store_problems(self.spark, self.types, self.compaction, self.purge))
        problems.extend(mixed_format_problems(self.spark.table_format, self.types))
        problems.extend(iceberg_problems(self.spark, self.types))
        problems.extend(partition_problems(self.spark.table_format, self.types))
        problems.extend(forward_problems(self.forwards, self.sources, self.listeners, self.bridge.exactly_once))
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
        (`config/../data` is shown and used as `data`). Never a warehouse's URI (`resolve_warehouse`):
        a Path would fold `s3a://bucket` into `s3a:/bucket`."""
        if isinstance(path, ObjectStoreUri):
            raise TypeError(f"{path} is an object store's URI, not a local path: use resolve_warehouse")
        path = Path(path).expanduser()
        return Path(os.path.normpath(path if path.is_absolute() else self.base_dir / path))

    def resolve_warehouse(self) -> Path | ObjectStoreUri:
        """`[spark] warehouse`: a directory made absolute (`resolve_path`), or an object store's URI
        as written."""
        warehouse = self.spark.warehouse
        return warehouse if isinstance(warehouse, ObjectStoreUri) else self.resolve_path(warehouse)

    def tables_warehouse(self) -> Path | ObjectStoreUri:
        """The warehouse as the commands and the maintenance read its tables: a directory made
        absolute, or an object store's URI carrying the delta-rs `storage_options` built from the S3A
        settings of `[spark] conf` (`config.warehouse.delta_rs_options`). ConfigError naming the key of
        an unresolved secret among those settings (a command loaded without secrets needs them there)."""
        warehouse = self.resolve_warehouse()
        if not isinstance(warehouse, ObjectStoreUri):
            return warehouse
        self.require_resolved("spark.conf")
        return warehouse.with_storage(delta_rs_options(warehouse, self.spark.conf))

    def local_warehouse(self, what: str) -> Path:
        """The warehouse directory, for `what` (a command, a feature) that reads or writes it as local
        files; ConfigError in one line when the warehouse is an object store or HDFS."""
        warehouse = self.resolve_warehouse()
        if isinstance(warehouse, ObjectStoreUri):
            raise ConfigError(f"{self._path or '<string>'}: spark.warehouse: {what} reads a local warehouse "
                              f"directory; {warehouse} is on {warehouse.scheme}://, which {what} does not support "
                              "yet (read its Delta tables with Spark or delta-rs)")
        return warehouse

    def iceberg_catalog(self) -> IcebergCatalog | None:
        """`[spark.iceberg]` resolved against this file (`config.iceberg.IcebergCatalog`). On an object
        store: None unless a type lands Iceberg tables there (`store_problems` allows s3a:// with a
        catalog uri), the warehouse then carrying its store's settings for pyiceberg's FileIO (as
        `tables_warehouse`; without them when `[spark.conf]` was loaded without its secrets: a command
        that reads the tables then says which key it needs)."""
        warehouse = self.resolve_warehouse()
        state_dir = self.resolve_path(self.bridge.state_dir)
        if not isinstance(warehouse, ObjectStoreUri):
            return IcebergCatalog(self.spark.iceberg, state_dir, warehouse)
        if not any((t.table_format or self.spark.table_format) == "iceberg" for t in self.types.values()):
            return None
        try:
            self.require_resolved("spark.conf")
        except ConfigError:
            pass  # loaded without its secrets: a command that reads the tables resolves them (`tables_warehouse`)
        else:
            warehouse = warehouse.with_storage(delta_rs_options(warehouse, self.spark.conf))
        return IcebergCatalog(self.spark.iceberg, state_dir, warehouse, lands_on_store=True)

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
        (`mqbridge.logsetup`) and change detection (`mqbridge.supervision.reload`) only, never for output."""
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
        if self.spark.iceberg.password is not None:
            found["spark.iceberg.password"] = self.spark.iceberg.password.get_secret_value()
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
