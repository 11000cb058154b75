"""`[spark.iceberg]`: the Iceberg catalog of the types with `table_format = "iceberg"`, and what the
rest of a configuration may not ask of those types (yet).

The bridge's Spark driver reaches the catalog as the Spark catalog `ICEBERG_CATALOG` ("mqbridge");
Java's JdbcCatalog keeps that name in its `catalog_name` column, so a reader without Spark (pyiceberg's
SqlCatalog, `mqbridge.landing.iceberg_read`) loads it under the same name. A type's table is
`mqbridge.<namespace>.<table>`, its data and metadata at `<warehouse>/<table>`.

`IcebergCatalog` is the section with what it is resolved against (the state directory, the warehouse):
the configuration binds it when it is loaded (`bind` / `bound`), and the Iceberg table format
(`mqbridge.table_formats.iceberg`) reads it from there, because the table-format seam hands a format
a table's location only.

On an `s3a://` warehouse the catalog must be configured (`uri`): the embedded SQLite catalog lives
beside the tables it describes, and SQLite cannot live on S3; kept in `state_dir` instead, a wiped
state_dir would lose every table's commit pointer, and the rebuilt ledger would then find no table
and land every message delivered again into a new one (`store_problems`). Such a warehouse holds
Iceberg tables only (`IcebergCatalog.on_store`): a table there is found by the configuration, not by
listing the store, so Delta and Iceberg types do not share one.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, model_validator

from mqbridge.config.base import ICEBERG_CATALOG_DIR, Model
from mqbridge.config.plaintext import is_loopback
from mqbridge.config.warehouse import Location, ObjectStoreUri
from mqbridge.errors import ConfigError, KeyedError, Loc

#: The Spark catalog (and pyiceberg catalog) name under which the bridge's Iceberg tables are kept.
ICEBERG_CATALOG = "mqbridge"
#: The folder of the embedded SQLite catalog under the warehouse (not a table: `check_table` refuses the name).
CATALOG_DIR = ICEBERG_CATALOG_DIR
#: The snapshot summary keys of a bulk's append (`snapshot-property.<key>` options of the append): the
#: bulk's id, and the ledger's transaction of it. Written by `mqbridge.landing.iceberg`, read by
#: `mqbridge.landing.iceberg_read`.
BULK_ID_PROPERTY = "mqbridge.bulk-id"
APP_ID_PROPERTY = "mqbridge.app-id"
VERSION_PROPERTY = "mqbridge.version"
#: The snapshot summary key of a fence (`mqbridge.landing.iceberg.fence`): the bulk id it fences, whose
#: write-audit-publish id it was published under. A fence adds no rows.
FENCE_PROPERTY = "mqbridge.fenced-bulk-id"
#: What a configuration is told when it asks an Iceberg type for what is not built.
NOT_BUILT = "not built yet for Iceberg tables"


class IcebergSection(Model):
    """`[spark.iceberg]`: the Iceberg catalog (used only when a type has `table_format = "iceberg"`)."""

    catalog: Literal["jdbc", "hive", "rest"] = Field(default="jdbc", description="The catalog's kind: jdbc (SQLite "
                                                     "or PostgreSQL), hive (a Hive metastore), rest (an Iceberg REST "
                                                     "catalog)")
    uri: str | None = Field(default=None, description="Where the catalog is: jdbc:postgresql://HOST:5432/DB, "
                            "thrift://HOST:9083 (hive), http(s)://HOST/... (rest); None with jdbc: the embedded "
                            "SQLite catalog <warehouse>/_iceberg/catalog.db, beside the tables it describes (one "
                            "host, a local warehouse only: an s3a:// warehouse needs its catalog's uri)")
    user: str | None = Field(default=None, description="The catalog's user (jdbc)")
    password: SecretStr | None = Field(default=None, description="The catalog's password (use ${ENV:...} or "
                                       "${FILE:...}); never logged, never on a command line")
    namespace: str = Field(default="mqbridge", pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$",
                           description="The namespace (database) holding the bridge's tables")
    allow_plaintext_password: bool = Field(default=False, description="Accept a password to a catalog that is not "
                                           "loopback without TLS (jdbc:postgresql without sslmode=require/verify-*, "
                                           "http://)")

    @model_validator(mode="after")
    def _check(self) -> IcebergSection:
        problems: list[tuple[Loc, str]] = []
        if self.uri is None and self.catalog != "jdbc":
            problems.append((("uri",), f'catalog = "{self.catalog}" needs its uri (hive: thrift://HOST:9083, '
                             "rest: https://HOST/...)"))
        if self.uri is not None and not self.uri.startswith(_SCHEMES[self.catalog]):
            problems.append((("uri",), f'a {self.catalog} catalog\'s uri starts with '
                             f'{" or ".join(_SCHEMES[self.catalog])} (e.g. {_EXAMPLES[self.catalog]})'))
        if self.password is not None and self.catalog == "hive":
            problems.append((("password",), "a Hive metastore takes no password (it authenticates by Kerberos, "
                             "not by [spark.iceberg] password): remove it"))
        if self.password is not None and self.catalog == "rest" and not self.user:
            problems.append((("user",), "a REST catalog's password is sent by HTTP basic authentication, which "
                             "takes a user as well: set [spark.iceberg] user"))
        problem = plaintext_problem(self) if not problems else None
        if problem:
            problems.append((("password",), problem))
        if problems:
            raise KeyedError(problems)
        return self


_SCHEMES = {"jdbc": ("jdbc:sqlite:", "jdbc:postgresql:"), "hive": ("thrift://",), "rest": ("http://", "https://")}
_EXAMPLES = {"jdbc": "jdbc:postgresql://db:5432/iceberg", "hive": "thrift://metastore:9083",
             "rest": "https://catalog.example.com/iceberg"}
_TLS_SSLMODES = ("require", "verify-ca", "verify-full")


def plaintext_problem(section: IcebergSection) -> str | None:
    """Why the catalog's password would travel in clear to a host that is not loopback (and
    `allow_plaintext_password` is not set), or None."""
    if section.password is None or section.allow_plaintext_password or section.uri is None:
        return None
    uri = section.uri
    if uri.startswith("jdbc:sqlite:"):
        return None
    if uri.startswith("jdbc:"):
        uri = uri[len("jdbc:"):]
        query = urlsplit(uri).query.lower()
        tls = any(f"sslmode={mode}" in query for mode in _TLS_SSLMODES) or "ssl=true" in query
    else:
        tls = uri.startswith("https://")
    host = urlsplit(uri).hostname or ""
    if tls or is_loopback(host):
        return None
    return (f"a password to the Iceberg catalog at {host or uri!r} without TLS would travel in clear: use TLS "
            "(jdbc:postgresql://...?sslmode=verify-full, https://), or set [spark.iceberg] "
            "allow_plaintext_password = true to accept the risk")


def iceberg_problems(spark: Any, types: Any) -> list[tuple[Loc, str]]:
    """What a configuration asks of its Iceberg types that is refused (each with its key and why): a
    Spark Connect `remote` (a server would go on committing a dead bridge's append, which no fence
    stops: Iceberg has no idempotent append), what an object-store warehouse may not hold (`store_problems`).
    (`retention`, `max_rows` and `[compaction]` are Iceberg's own commits: `mqbridge.maintenance.iceberg`.)"""
    names = sorted(n for n, t in types.items() if (t.table_format or spark.table_format) == "iceberg")
    if not names:
        return []
    problems: list[tuple[Loc, str]] = []
    if spark.remote:
        problems.append((("spark", "remote"), f"Iceberg tables (types {', '.join(names)}) are landed by the bridge's "
                         "own Spark driver only: a Spark Connect server would go on committing a dead bridge's bulk "
                         "after recovery decided it had not landed (Iceberg has no idempotent append to fence it); "
                         "remove remote, or land these types as delta"))
    if isinstance(spark.warehouse, ObjectStoreUri):
        problems.extend(store_problems(spark, types, names))
    return problems


def store_problems(spark: Any, types: Any, names: list[str]) -> list[tuple[Loc, str]]:
    """What an object-store or HDFS warehouse may not hold of the Iceberg types `names`: HDFS at all
    (not built); on `s3a://`, the embedded catalog (its SQLite file cannot live on the store, and in
    state_dir a wiped state_dir would lose the tables' commit pointers: a catalog `uri` is required),
    Delta or Parquet types beside them (a table on the store is known by the configuration's format).
    Their purge, compaction and table templates work there as on a local warehouse (Iceberg's own commits
    through the catalog, `mqbridge.maintenance.iceberg`; a template's tables found by listing the store and
    asking the catalog, `mqbridge.landing.tables`)."""
    warehouse = spark.warehouse
    listed = ", ".join(names)
    if warehouse.scheme != "s3a":
        return [(("spark", "warehouse"), f"Iceberg tables on {warehouse.scheme}:// ({warehouse}) are {NOT_BUILT}: "
                 "use an s3a:// or a local warehouse, or land these types as delta")]
    problems: list[tuple[Loc, str]] = []
    if spark.iceberg.uri is None:
        problems.append((("spark", "iceberg", "uri"), f"Iceberg tables on {warehouse} (types {listed}) need a catalog "
                         "server: the embedded SQLite catalog cannot live on S3, and kept in state_dir a wiped "
                         "state_dir would lose every table's commit pointer (the messages delivered again would land "
                         "into new tables); set uri (jdbc:postgresql://HOST:5432/DB, thrift://HOST:9083, "
                         "https://HOST/...)"))
    others = sorted(n for n, t in types.items() if (t.table_format or spark.table_format) != "iceberg")
    if others:
        problems.append((("spark", "warehouse"), f"{warehouse} holds the Iceberg tables of types {listed}; the types "
                         f"{', '.join(others)} are not Iceberg: a warehouse on an object store holds one transactional "
                         'format (its tables are not told apart by listing the store); set table_format = "iceberg" '
                         "for every type, or give them another bridge"))
    return problems


@dataclass(frozen=True)
class IcebergCatalog:
    """The catalog of a loaded configuration: `[spark.iceberg]` with the state directory (of the
    embedded SQLite catalog) and the warehouse (the catalog's warehouse; each table's location is
    `<warehouse>/<table>`) made absolute."""

    section: IcebergSection
    state_dir: Path
    warehouse: Location
    #: Whether the configuration lands Iceberg tables on this object-store warehouse (it then holds
    #: no other format: `store_problems`), so that a table there is Iceberg (`on_store`).
    lands_on_store: bool = False

    @property
    def uri(self) -> str:
        """The catalog's URI: the configured one, else the embedded SQLite catalog's."""
        return self.section.uri or f"jdbc:sqlite:{self.sqlite_path}"

    @property
    def sqlite_path(self) -> Path:
        """Where the embedded SQLite catalog is (used when no uri is configured): beside the tables it
        describes, under the (local) warehouse, not under `state_dir`. The catalog's pointer to each
        table's current metadata file is the table's commit point, which the table's files alone do not
        tell (a failed commit can leave a newer metadata file no snapshot of the table ever reached):
        a wiped or replaced state_dir must not lose it, since the ledger is then rebuilt from the tables."""
        if isinstance(self.warehouse, ObjectStoreUri):  # refused at load (`store_problems`)
            raise ConfigError(f"the embedded Iceberg catalog cannot live on {self.warehouse}: set [spark.iceberg] uri")
        return self.warehouse / CATALOG_DIR / "catalog.db"

    def on_store(self, location: object) -> bool:
        """Whether `location` is a table on the object-store warehouse of this configuration's Iceberg
        tables (one there is Iceberg: the configuration lands no other format on that store)."""
        if not (self.lands_on_store and isinstance(location, ObjectStoreUri)):
            return False
        try:
            location.relative_to(self.warehouse)
        except ValueError:
            return False
        return True

    @property
    def namespace(self) -> str:
        return self.section.namespace

    def identifier(self, table: str) -> str:
        """The Spark identifier of the table `table` (a directory name under the warehouse)."""
        return f"{ICEBERG_CATALOG}.{self.section.namespace}.`{table}`"

    def name_of(self, location: object) -> str:
        """The name in the catalog of the table at `location`: its directory under the warehouse (the
        last part of a location elsewhere)."""
        if isinstance(location, ObjectStoreUri):
            try:
                return str(location.relative_to(self.warehouse))
            except ValueError:
                return location.name
        path = Path(str(location))
        try:
            return str(path.relative_to(self.warehouse))
        except ValueError:
            return path.name


_bound: IcebergCatalog | None = None
_bound_lock = threading.Lock()


def bind(catalog: IcebergCatalog | None) -> None:
    """Make `catalog` the one the Iceberg table format uses (done when a configuration is loaded)."""
    global _bound
    with _bound_lock:
        _bound = catalog


def bound_or_none() -> IcebergCatalog | None:
    """The catalog of the loaded configuration, None when no configuration was loaded."""
    with _bound_lock:
        return _bound


def bound() -> IcebergCatalog:
    """The catalog of the loaded configuration; ConfigError when no configuration was loaded."""
    with _bound_lock:
        catalog = _bound
    if catalog is None:
        raise ConfigError("Iceberg tables need the configuration's [spark.iceberg] catalog, and no configuration "
                          "was loaded in this process")
    return catalog


__all__ = ["APP_ID_PROPERTY", "BULK_ID_PROPERTY", "CATALOG_DIR", "FENCE_PROPERTY", "ICEBERG_CATALOG", "NOT_BUILT",
           "VERSION_PROPERTY",
           "IcebergCatalog", "IcebergSection", "bind", "bound", "bound_or_none", "iceberg_problems",
           "plaintext_problem", "store_problems"]
