"""Reading a landed Apache Iceberg table back without Spark: what `mqbridge tables`, `where`, `replay`,
`ledger --verify` / `--abandon`, the ledger's rebuild and the schema check ask of an Iceberg table,
answered with pyiceberg (the `iceberg` extra) through the same catalog the bridge's Spark writes to.

The catalog: `[spark.iceberg]` names it as Java's Iceberg does (`jdbc:sqlite:/path`,
`jdbc:postgresql://host:port/db`, `thrift://host:9083`, `http(s)://...`); `pyiceberg_properties` says
the same catalog in pyiceberg's words (its SqlCatalog on SQLAlchemy, its Hive and REST catalogs), and
`open_catalog` loads it under `ICEBERG_CATALOG`: Java's JdbcCatalog keeps the Spark catalog's name in
its `catalog_name` column, and pyiceberg's SqlCatalog sees only the rows of its own name. A reader
never changes the catalog (`init_catalog_tables` off: pyiceberg would otherwise create its tables in a
catalog Spark has not written yet). Java's JdbcCatalog creates its tables in its "V0" layout (no
`iceberg_type` column), which pyiceberg reads as is (its warning about it is not passed on).

A table is `(namespace, table)` in that catalog (`load_table`). What is read, each from the table's
metadata unless said otherwise: its snapshots (`snapshots`: each bulk's append carries the bulk's id and
the ledger's transaction as snapshot properties, `mqbridge.config.iceberg.BULK_ID_PROPERTY` and the
others beside it); its containers per
put_date (`containers`: the data files' record counts, sizes and put_timestamp bounds of the current
snapshot, without reading a row); its typed columns (`typed_schema`); and, by reading rows, the rows
of some identities (`rows_with_identities`), the rows per bulk (`rows_by_bulk`) and a whole scan, of the
current snapshot or an older one (`scan`: time travel for `replay`).

Errors: a catalog that does not answer is an outage (`IcebergCatalogUnavailableError`, a
`SinkOutageError`: nothing about any message), one that refuses the credentials a configuration
error (`ConfigError`); a table that is not there `IcebergTableMissingError`. Each names the catalog by
its URI with the password left out (`shown_uri`); no error or log line carries a password, key or
token (`CatalogProperties` hides them in its repr as well).

Left for object stores (the configuration refuses an Iceberg warehouse that is not a local directory
for now): an `s3a://` warehouse is passed on with the S3 settings pyiceberg's FileIO takes
(`_s3_properties`, from the delta-rs options the warehouse's `ObjectStoreUri` carries), checked by unit
tests only; HDFS would need pyarrow's libhdfs and is not tried.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from pydantic import SecretStr

from mqbridge.config.iceberg import APP_ID_PROPERTY, BULK_ID_PROPERTY, ICEBERG_CATALOG, VERSION_PROPERTY
from mqbridge.config.warehouse import Location, ObjectStoreUri
from mqbridge.errors import BridgeError, ConfigError, SinkOutageError
from mqbridge.landing.containers import Container
from mqbridge.landing.rows import IDENTITY_COLUMN, LANDED_COLUMNS

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

    from mqbridge.config.iceberg import IcebergCatalog

#: What says to install pyiceberg.
INSTALL = 'pip install "mqbridge[iceberg]" (pyiceberg)'
#: The snapshot operations that change rows (a DELETE, an overwrite: a purge); `replace` is a rewrite
#: (compaction) that keeps every row, `append` adds rows.
ROW_CHANGING = frozenset({"overwrite", "delete"})
#: The properties whose values are secrets (shown as "***"); the password of a SQL catalog is in its `uri`.
SECRET_PROPERTIES = frozenset({"auth.basic.password", "credential", "token", "s3.access-key-id",
                               "s3.secret-access-key", "s3.session-token"})
#: How long a connection to a PostgreSQL catalog may take before the catalog counts as not answering.
CONNECT_TIMEOUT = 10
#: The landed columns (and the identity) are not typed columns (`mqbridge.landing.schema_check`).
_NOT_TYPED = frozenset(c.lower() for c in (*LANDED_COLUMNS, "_row", "_identity", IDENTITY_COLUMN))
#: JDBC's PostgreSQL URL parameters that libpq (psycopg2) takes, by their libpq names.
_JDBC_PG_PARAMETERS = {"sslmode": "sslmode", "sslrootcert": "sslrootcert", "sslcert": "sslcert", "sslkey": "sslkey",
                       "connecttimeout": "connect_timeout", "applicationname": "application_name"}


class IcebergReadError(BridgeError):
    """An Iceberg table or its catalog cannot be read; the message names the catalog (its URI without
    the password) and the table."""


class IcebergCatalogUnavailableError(IcebergReadError, SinkOutageError):
    """The Iceberg catalog does not answer (its database or server down or unreachable): an outage,
    nothing about any message."""


class IcebergTableMissingError(IcebergReadError):
    """The table (or its namespace, or the embedded SQLite catalog itself) is not there: nothing was
    landed in it yet, or it was dropped."""


class CatalogProperties(dict[str, str]):
    """pyiceberg's properties of one catalog (`pyiceberg_properties`): a dict whose repr shows the
    catalog's URI without its password and no secret property's value (`SECRET_PROPERTIES`), since an
    object holding them may be printed into a log or an error; never pickled (a child process builds
    its own)."""

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={'***' if k in SECRET_PROPERTIES else repr(shown_uri(v) if k == 'uri' else v)}"
                          for k, v in sorted(self.items()))
        return f"CatalogProperties({shown})"

    __str__ = __repr__

    def __reduce__(self) -> Any:
        raise TypeError("CatalogProperties hold credentials: they are not pickled")


# --- the catalog ------------------------------------------------------------------------------------


def pyiceberg_properties(catalog: str, uri: str, user: str | None = None,
                         password: str | SecretStr | None = None,
                         warehouse: Location | str | None = None) -> CatalogProperties:
    """The properties under which pyiceberg reaches the catalog `[spark.iceberg]` names (its kind
    `catalog`, "jdbc" | "hive" | "rest", and Java's `uri`):

    - `jdbc:sqlite:/path/catalog.db`: SqlCatalog on `sqlite:////path/catalog.db`;
    - `jdbc:postgresql://host:port/db?...`: SqlCatalog on `postgresql+psycopg2://user:password@host:port/db`,
      the JDBC parameters libpq has too carried over (`sslmode`, `sslrootcert`, ..., JDBC's `ssl=true`
      as `sslmode=require`), a connect timeout added (`CONNECT_TIMEOUT`);
    - `thrift://host:9083`: the Hive catalog (no password: neither Java's nor pyiceberg's takes one);
    - `http(s)://...`: the REST catalog, `user` and `password` as HTTP basic authentication (as the
      bridge's Spark catalog gets them: `rest.auth.type = basic`), kept flat here (`auth.type`,
      `auth.basic.username`, `auth.basic.password`) and nested as pyiceberg wants by `open_catalog`.

    `warehouse`: a local directory (as `file://`) or an `s3a://` URI with its store's settings. ConfigError
    (naming the URI without its password) when the URI is not one of these."""
    secret = password.get_secret_value() if isinstance(password, SecretStr) else password
    properties = CatalogProperties()
    if catalog == "jdbc":
        properties.update({"type": "sql", "uri": _sqlalchemy_url(uri, user, secret), "init_catalog_tables": "false"})
    elif catalog == "hive":
        if not uri.startswith("thrift://"):
            raise ConfigError(f"a hive Iceberg catalog's uri is thrift://HOST:9083, not {shown_uri(uri)}")
        if secret:
            raise ConfigError(f"the Hive Iceberg catalog at {uri} takes no password (a Hive metastore "
                              "authenticates by Kerberos, not by [spark.iceberg] password): remove it")
        properties.update({"type": "hive", "uri": uri})
    elif catalog == "rest":
        if not uri.startswith(("http://", "https://")):
            raise ConfigError(f"a rest Iceberg catalog's uri is http(s)://..., not {shown_uri(uri)}")
        properties.update({"type": "rest", "uri": uri})
        if secret and not user:
            raise ConfigError(f"the REST Iceberg catalog at {shown_uri(uri)} is given a password without a user: "
                              "HTTP basic authentication takes both ([spark.iceberg] user)")
        if user:
            properties.update({"auth.type": "basic", "auth.basic.username": user})
            if secret:
                properties["auth.basic.password"] = secret
    else:
        raise ConfigError(f'an Iceberg catalog is "jdbc", "hive" or "rest", not {catalog!r}')
    if warehouse is not None:
        properties.update(_warehouse_properties(warehouse))
    return properties


def catalog_properties(catalog: IcebergCatalog) -> CatalogProperties:
    """`pyiceberg_properties` of a loaded configuration's catalog (`mqbridge.config.iceberg.bound()`):
    the catalog its Spark driver writes to, its password resolved."""
    section = catalog.section
    return pyiceberg_properties(section.catalog, catalog.uri, section.user, section.password, catalog.warehouse)


def _sqlalchemy_url(uri: str, user: str | None, password: str | None) -> str:
    """The SQLAlchemy URL of Java's JDBC URL `uri` (see `pyiceberg_properties`)."""
    if uri.startswith("jdbc:sqlite:"):
        path = uri[len("jdbc:sqlite:"):]
        if path.startswith("file:"):
            path = path[len("file:"):]
        if "?" in path or not path or path == ":memory:":
            raise ConfigError(f"the Iceberg catalog {uri} is read as a SQLite file: give it as jdbc:sqlite:/PATH "
                              "(no parameters, not in memory)")
        return f"sqlite:///{Path(path).absolute()}"
    if not uri.startswith("jdbc:postgresql:"):
        raise ConfigError(f"an Iceberg JDBC catalog is jdbc:sqlite:/PATH or jdbc:postgresql://HOST:PORT/DB, not "
                          f"{shown_uri(uri)}")
    rest = uri[len("jdbc:postgresql:"):]
    if not rest.startswith("//"):  # jdbc:postgresql:DB means the database on localhost:5432
        rest = f"//localhost/{rest}"
    parts = urlsplit(rest)
    if "," in parts.netloc:
        raise ConfigError(f"the Iceberg catalog {shown_uri(uri)} names several hosts: the reader without Spark "
                          "takes one (give the primary's)")
    query: dict[str, str] = {}
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        name = key.lower()
        if name == "user":
            user = user or value
        elif name == "password":
            password = password or value
        elif name == "ssl":
            if value.lower() == "true":
                query.setdefault("sslmode", "require")
        elif name in _JDBC_PG_PARAMETERS:
            query[_JDBC_PG_PARAMETERS[name]] = value
        else:
            raise ConfigError(f"the Iceberg catalog {shown_uri(uri)} has the JDBC parameter {key!r}, which the "
                              f"reader without Spark does not know (it takes {', '.join(sorted(_JDBC_PG_PARAMETERS))}"
                              " and ssl): remove it")
    query.setdefault("connect_timeout", str(CONNECT_TIMEOUT))
    login = ""
    if user:
        login = quote(user, safe="") + (f":{quote(password, safe='')}" if password else "") + "@"
    host = parts.hostname or "localhost"
    host = f"[{host}]" if ":" in host else host
    port = f":{parts.port}" if parts.port else ""
    database = parts.path.lstrip("/") or "postgres"
    params = "&".join(f"{k}={quote(v, safe='/')}" for k, v in query.items())
    return f"postgresql+psycopg2://{login}{host}{port}/{quote(database, safe='')}?{params}"


def _warehouse_properties(warehouse: Location | str) -> dict[str, str]:
    """The catalog's warehouse for pyiceberg: a local directory as a `file://` URI; an `s3a://` URI as
    written, with its store's settings (`_s3_properties`)."""
    if isinstance(warehouse, ObjectStoreUri):
        return {"warehouse": str(warehouse), **_s3_properties(warehouse)}
    text = str(warehouse)
    if "://" in text:
        return {"warehouse": text}
    return {"warehouse": Path(text).absolute().as_uri()}


def _s3_properties(warehouse: ObjectStoreUri) -> dict[str, str]:
    """pyiceberg's S3 FileIO settings from the delta-rs options an `s3a://` warehouse carries
    (`mqbridge.config.warehouse.delta_rs_options`, built from the same S3A settings as Spark's)."""
    options = warehouse.storage_options
    found: dict[str, str] = {}
    endpoint = options.get("AWS_ENDPOINT_URL")
    virtual = options.get("AWS_VIRTUAL_HOSTED_STYLE_REQUEST", "true") == "true"
    if endpoint:
        bucket = warehouse.bucket
        scheme, _, rest = endpoint.partition("://")
        if virtual and bucket and rest.startswith(f"{bucket}."):  # delta-rs takes the bucket's own host
            rest = rest[len(bucket) + 1:]
        found["s3.endpoint"] = f"{scheme}://{rest}"
    found["s3.force-virtual-addressing"] = "true" if virtual else "false"
    for option, setting in (("AWS_REGION", "s3.region"), ("AWS_ACCESS_KEY_ID", "s3.access-key-id"),
                            ("AWS_SECRET_ACCESS_KEY", "s3.secret-access-key"),
                            ("AWS_SESSION_TOKEN", "s3.session-token")):
        if options.get(option):
            found[setting] = options[option]
    found["s3.connect-timeout"] = "15"
    found["s3.request-timeout"] = "60"
    return found


def shown_uri(uri: str) -> str:
    """`uri` (a JDBC, SQLAlchemy or HTTP URL) with any password left out: the user's part of its
    authority as `user:***`, a `password=` parameter as `password=***`."""
    scheme, sep, rest = uri.partition("://")
    if not sep:
        scheme, rest = "", uri
    authority, slash, tail = rest.partition("/")
    if "@" in authority:
        login, _, host = authority.rpartition("@")
        user = login.split(":", 1)[0]
        authority = f"{user}:***@{host}" if ":" in login else f"{user}@{host}"
    text = f"{scheme}{sep}{authority}{slash}{tail}"
    base, question, query = text.partition("?")
    if question:
        query = "&".join(f"{p.split('=', 1)[0]}=***" if p.split("=", 1)[0].lower() == "password" else p
                         for p in query.split("&"))
    return f"{base}{question}{query}"


def catalog_name(properties: Mapping[str, str]) -> str:
    """The catalog in a sentence: "the Iceberg catalog mqbridge at <its URI without the password>"."""
    return f"the Iceberg catalog {ICEBERG_CATALOG} at {shown_uri(properties.get('uri', '?'))}"


def _redacted(text: str, properties: Mapping[str, str]) -> str:
    """`text` (a driver's error) with every secret of `properties` replaced by "***"."""
    secrets = [v for k, v in properties.items() if k in SECRET_PROPERTIES and v]
    uri = properties.get("uri", "")
    login = urlsplit(uri).password if "://" in uri else None
    if login:
        secrets += [login, unquote(login)]
    for secret in sorted(set(secrets), key=len, reverse=True):
        text = text.replace(secret, "***")
    if uri and uri != shown_uri(uri):
        text = text.replace(uri, shown_uri(uri))
    return text


class _QuietV0(logging.Filter):
    """Drops pyiceberg's warning that a SQL catalog has the V0 layout: Java's JdbcCatalog makes it so."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "detected a v0 schema" not in record.getMessage()


_V0_FILTER = _QuietV0()


def open_catalog(properties: Mapping[str, str]) -> Catalog:
    """The catalog of `properties` (`pyiceberg_properties`), loaded by pyiceberg under `ICEBERG_CATALOG`
    and asked once that it answers. IcebergTableMissingError when its SQLite file is not there (no
    table was landed yet); IcebergCatalogUnavailableError when it does not answer; ConfigError when
    pyiceberg is missing or the catalog refuses the credentials."""
    try:
        from pyiceberg.catalog import load_catalog
    except ImportError as exc:
        raise ConfigError(f"reading Iceberg tables without Spark needs pyiceberg: {INSTALL}") from exc
    uri = properties.get("uri", "")
    if properties.get("type") == "sql" and uri.startswith("sqlite:///"):
        path = Path(uri[len("sqlite:///"):])
        if not path.is_file():  # SQLite would create it
            raise IcebergTableMissingError(f"{catalog_name(properties)} is not there yet ({path} does not exist: no "
                                           "Iceberg table was landed with it)")
    logging.getLogger("pyiceberg.catalog.sql").addFilter(_V0_FILTER)
    try:
        catalog = load_catalog(ICEBERG_CATALOG, **_nested(properties))
        engine = getattr(catalog, "engine", None)
        if engine is not None:  # SqlCatalog: pyiceberg takes a connection failure for a catalog without tables
            with engine.connect():
                pass
        else:
            catalog.list_namespaces()
    except Exception as exc:
        raise _catalog_error(exc, properties, "cannot be opened") from exc
    return catalog


def _nested(properties: Mapping[str, str]) -> dict[str, Any]:
    """`properties` as pyiceberg's `load_catalog` takes them: the REST catalog's `auth.*` keys as the
    one nested `auth` mapping ({"type": "basic", "basic": {"username": ..., "password": ...}})."""
    found: dict[str, Any] = {k: v for k, v in properties.items() if not k.startswith("auth.")}
    auth: dict[str, Any] = {}
    for key, value in properties.items():
        if key.startswith("auth."):
            *path, last = key.split(".")[1:]
            node = auth
            for part in path:
                node = node.setdefault(part, {})
            node[last] = value
    if auth:
        found["auth"] = auth
    return found


def _catalog_error(exc: BaseException, properties: Mapping[str, str], doing: str) -> BridgeError:
    """The error to raise for `exc`, raised while `doing` something with the catalog of `properties`."""
    from pyiceberg import exceptions as ice

    if isinstance(exc, BridgeError):
        return exc
    detail = _redacted(_one_line(exc), properties)
    where = catalog_name(properties)
    if isinstance(exc, ice.NoSuchTableError | ice.NoSuchNamespaceError | ice.NoSuchIcebergTableError):
        return IcebergTableMissingError(f"{where}: {doing}: {detail}")
    lowered = detail.lower()
    if isinstance(exc, ice.UnauthorizedError | ice.ForbiddenError | ice.OAuthError) or any(
            word in lowered for word in ("password authentication failed", "authentication failed",
                                         "permission denied", "no password supplied", "role \"")):
        return ConfigError(f"{where} refuses the credentials of [spark.iceberg] ({doing}): {detail}")
    return IcebergCatalogUnavailableError(f"{where} {doing}: {detail}")


def _one_line(exc: BaseException) -> str:
    """An error's text as one line, without SQLAlchemy's background link and the SQL it ran."""
    text = " ".join(str(exc).split())
    for marker in (" (Background on this error at:", " [SQL:"):
        text = text.split(marker, 1)[0]
    return text or type(exc).__name__


def table_exists(catalog: Catalog, identifier: tuple[str, str]) -> bool:
    """Whether the table `identifier` (namespace, table) is in `catalog`; IcebergCatalogUnavailableError
    when the catalog does not answer."""
    try:
        return bool(catalog.table_exists(identifier))
    except Exception as exc:
        raise _catalog_error(exc, catalog.properties, f"cannot say whether {_shown(identifier)} exists") from exc


def load_table(catalog: Catalog, identifier: tuple[str, str]) -> Table:
    """The table `identifier` (namespace, table) of `catalog` as its current metadata says;
    IcebergTableMissingError when it is not there, IcebergCatalogUnavailableError when the catalog
    or the table's metadata file cannot be read."""
    try:
        return catalog.load_table(identifier)
    except Exception as exc:
        raise _catalog_error(exc, catalog.properties, f"cannot load the table {_shown(identifier)}") from exc


def _shown(identifier: tuple[str, str]) -> str:
    return ".".join((ICEBERG_CATALOG, *identifier))


def _table_name(table: Table) -> str:
    return _shown(cast("tuple[str, str]", tuple(table.name())))


# --- what the metadata says ---------------------------------------------------------------------------


@dataclass(frozen=True)
class SnapshotFacts:
    """What `describe` says of a table: its current snapshot (None: no row was ever written) and how
    many snapshots its metadata keeps (older ones expired are gone)."""

    current_snapshot_id: int | None
    snapshots: int


def snapshot_facts(table: Table) -> SnapshotFacts:
    """The current snapshot and the number of snapshots of `table`."""
    current = table.current_snapshot()
    return SnapshotFacts(current.snapshot_id if current is not None else None, len(table.metadata.snapshots))


@dataclass(frozen=True)
class SnapshotBulk:
    """One snapshot of a table, with the bulk it carries when a bulk's append made it."""

    snapshot_id: int
    committed_at: float  # epoch seconds (the snapshot's timestamp-ms)
    operation: str  # append, overwrite, delete, replace
    bulk_id: str | None  # BULK_ID_PROPERTY; None: not a bulk's append (a purge, a compaction, another writer)
    app_id: str | None  # APP_ID_PROPERTY: the ledger's TableTransaction of the bulk
    version: int | None  # VERSION_PROPERTY
    current: bool  # the current snapshot or one of its ancestors (False: rolled back, staged)

    @property
    def changes_rows(self) -> bool:
        """Whether it removed or rewrote rows (a DELETE, an overwrite: a purge), `ROW_CHANGING`."""
        return self.operation in ROW_CHANGING


def snapshots(table: Table) -> list[SnapshotBulk]:
    """Every snapshot the metadata of `table` keeps, oldest first, with the bulk ids and transactions
    their appends carry: what `ledger --verify`, `--abandon`, recovery and the ledger's rebuild look
    bulks up in. A snapshot expired (`expire_snapshots`) is no longer listed."""
    current = table.current_snapshot()
    lineage: set[int] = set()
    by_id = {s.snapshot_id: s for s in table.metadata.snapshots}
    walk = current
    while walk is not None and walk.snapshot_id not in lineage:
        lineage.add(walk.snapshot_id)
        walk = by_id.get(walk.parent_snapshot_id) if walk.parent_snapshot_id is not None else None
    found = []
    for snapshot in sorted(table.metadata.snapshots, key=lambda s: (s.timestamp_ms, s.sequence_number or 0)):
        summary: dict[str, str] = dict(snapshot.summary.additional_properties) if snapshot.summary else {}
        operation = str(snapshot.summary.operation.value) if snapshot.summary else ""
        version = summary.get(VERSION_PROPERTY)
        found.append(SnapshotBulk(snapshot.snapshot_id, snapshot.timestamp_ms / 1000.0, operation,
                                  summary.get(BULK_ID_PROPERTY), summary.get(APP_ID_PROPERTY),
                                  int(version) if version is not None and version.lstrip("-").isdigit() else None,
                                  snapshot.snapshot_id in lineage))
    return found


def snapshot_of_bulk(table: Table, bulk_id: str) -> SnapshotBulk | None:
    """The snapshot of the current lineage of `table` whose append carries `bulk_id`; None when there
    is none (the bulk did not commit, was rolled back, or its snapshot expired)."""
    return next((s for s in reversed(snapshots(table)) if s.bulk_id == bulk_id and s.current), None)


def bulk_ids(table: Table) -> dict[str, SnapshotBulk]:
    """The bulks whose appends are in the current lineage of `table`, by bulk id."""
    return {s.bulk_id: s for s in snapshots(table) if s.bulk_id is not None and s.current}


def containers(table: Table) -> list[Container]:
    """Every put_date partition of `table` with rows in its current snapshot, oldest first (rows, size,
    data files, put_timestamp bounds), from its manifests: no row is read unless a partition has
    delete files (merge-on-read deletes: its rows are then counted by reading them)."""
    current = table.current_snapshot()
    if current is None:
        return []
    try:
        files = table.inspect.files(current.snapshot_id).to_pylist()
    except Exception as exc:
        raise _read_error(exc, table, "cannot list its files") from exc
    root = _location(table.location())
    by_date: dict[str, list[dict[str, Any]]] = {}
    with_deletes: set[str] = set()
    for entry in files:
        put_date = _put_date(entry)
        if entry["content"] != 0:  # position or equality deletes
            with_deletes.add(put_date)
            continue
        by_date.setdefault(put_date, []).append(entry)
    found = []
    for put_date, entries in sorted(by_date.items()):
        bounds = [(entry.get("readable_metrics") or {}).get("put_timestamp") or {} for entry in entries]
        oldest = [b["lower_bound"] for b in bounds if b.get("lower_bound") is not None]
        newest = [b["upper_bound"] for b in bounds if b.get("upper_bound") is not None]
        rows = sum(int(entry["record_count"]) for entry in entries)
        if put_date in with_deletes:
            rows = _count_rows(table, put_date)
        if rows == 0:
            continue
        found.append(Container(cast(Path, root), put_date,
                               tuple(cast(Path, _location(str(entry["file_path"]))) for entry in entries),
                               rows, sum(int(entry["file_size_in_bytes"]) for entry in entries),
                               _utc(min(oldest)) if oldest else None, _utc(max(newest)) if newest else None))
    return found


def _put_date(entry: Mapping[str, Any]) -> str:
    """The put_date of a data file: its partition's, or (a partition spec without it) its column's bounds."""
    partition = entry.get("partition") or {}
    value = partition.get("put_date")
    if value is None:
        value = ((entry.get("readable_metrics") or {}).get("put_date") or {}).get("lower_bound")
    return value.isoformat() if isinstance(value, date) else str(value)


def _count_rows(table: Table, put_date: str) -> int:
    from pyiceberg.expressions import EqualTo, Reference
    from pyiceberg.expressions.literals import literal

    only = EqualTo(term=Reference("put_date"), value=literal(put_date))
    return int(scan(table, ["put_date"], row_filter=only).num_rows)


def _location(text: str) -> Location:
    """A file's or the table's location as the bridge names it: a local Path, else the URI."""
    if text.startswith("file:"):
        return Path(unquote(urlsplit(text).path))
    if "://" not in text:
        return Path(text)
    return ObjectStoreUri(text)


def _utc(value: Any) -> datetime:
    if isinstance(value, datetime):
        return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)
    raise TypeError(f"put_timestamp bounds are not timestamps: {value!r}")


def typed_schema(table: Table) -> pa.Schema:
    """The typed columns of `table` (its current schema, the landed columns and the identity left
    out) as a pyarrow schema: what the schema check compares a type's configured schema with. Each
    field's nullability is Iceberg's (`required` as not nullable); a column's comment (Iceberg's `doc`)
    is in its metadata as b"doc"."""
    import pyarrow as pa

    schema = table.schema().as_arrow()
    fields = []
    for field in schema:
        if field.name.lower() in _NOT_TYPED:
            continue
        metadata = {k: v for k, v in (field.metadata or {}).items() if not k.startswith(b"PARQUET:")}
        fields.append(field.with_metadata(metadata or None))
    return pa.schema(fields)


# --- reading rows -------------------------------------------------------------------------------------


def scan(table: Table, columns: Sequence[str] | None = None, *, snapshot_id: int | None = None,
         as_of: float | datetime | None = None, row_filter: Any = None) -> pa.Table:
    """The rows of `table` (only `columns` when given, in that order) as a pyarrow Table: of its current snapshot, of
    the snapshot `snapshot_id`, or of the snapshot that was current at `as_of` (epoch seconds or an
    aware datetime: time travel, as `replay` reads); `row_filter` a pyiceberg expression or string.
    IcebergReadError naming the table when there is no such snapshot."""
    from pyiceberg.expressions import AlwaysTrue

    if as_of is not None:
        seconds = as_of.timestamp() if isinstance(as_of, datetime) else float(as_of)
        snapshot = table.snapshot_as_of_timestamp(int(seconds * 1000))
        if snapshot is None:
            raise IcebergReadError(f"the Iceberg table {_table_name(table)} has no snapshot at or before "
                                   f"{datetime.fromtimestamp(seconds, timezone.utc).isoformat()} (its oldest "
                                   "kept snapshot is younger, or it was created later)")
        snapshot_id = snapshot.snapshot_id
    elif snapshot_id is not None and table.snapshot_by_id(snapshot_id) is None:
        raise IcebergReadError(f"the Iceberg table {_table_name(table)} has no snapshot {snapshot_id} (expired, "
                               "or of another table)")
    selected = tuple(columns) if columns is not None else ("*",)
    try:
        frame = table.scan(row_filter=row_filter if row_filter is not None else AlwaysTrue(),
                           selected_fields=selected, snapshot_id=snapshot_id).to_arrow()
    except Exception as exc:
        raise _read_error(exc, table, "cannot be read") from exc
    return frame.select(list(columns)) if columns is not None else frame  # in the order asked for


def _read_error(exc: BaseException, table: Table, doing: str) -> BridgeError:
    """A failed read of `table`'s files: an outage (their storage does not answer or a file is gone)."""
    if isinstance(exc, BridgeError):
        return exc
    return IcebergCatalogUnavailableError(f"the Iceberg table {_table_name(table)} {doing}: {_one_line(exc)}")


def rows_with_identities(table: Table, identities: Iterable[str],
                         columns: Sequence[str] = (IDENTITY_COLUMN, "put_date", "bulk_id", "put_timestamp"),
                         put_dates: Sequence[str] = ()) -> pa.Table:
    """The rows of the current snapshot of `table` whose identity column is one of `identities` (in
    the partitions `put_dates` only, when given: the ledger knows them), their `columns`: what
    `mqbridge where` shows of a landed message. Files whose identity bounds exclude them are skipped."""
    from pyiceberg.expressions import And

    wanted = sorted(set(identities))
    if not wanted:
        import pyarrow as pa

        return pa.table({c: pa.array([], pa.string()) for c in columns})
    expression: Any = _in(IDENTITY_COLUMN, wanted)
    if put_dates:
        expression = And(expression, _in("put_date", put_dates))
    return scan(table, list(columns), row_filter=expression)


def _in(column: str, values: Iterable[str]) -> Any:
    """pyiceberg's `column IN (values)` (a file whose bounds exclude them all is not read)."""
    from pyiceberg.expressions import In, Reference
    from pyiceberg.expressions.literals import literal

    return In(term=Reference(column), values={literal(v) for v in values})


def put_dates_of(table: Table, identities: Iterable[str], put_dates: Sequence[str] = ()) -> list[str]:
    """The put_dates (YYYY-MM-DD) of the rows of `table` whose identity is one of `identities`."""
    rows = rows_with_identities(table, identities, (IDENTITY_COLUMN, "put_date"), put_dates)
    return sorted({d.isoformat() if isinstance(d, date) else str(d) for d in rows.column("put_date").to_pylist()})


def rows_by_bulk(table: Table, bulk_ids: Iterable[str]) -> collections.Counter[str]:
    """How many rows of the current snapshot of `table` carry each of `bulk_ids` (its `bulk_id` column)."""
    wanted = sorted(set(bulk_ids))
    if not wanted:
        return collections.Counter()
    column = scan(table, ["bulk_id"], row_filter=_in("bulk_id", wanted)).column("bulk_id")
    counts = column.value_counts().to_pylist()  # [{"values": bulk id, "counts": rows}]
    return collections.Counter({str(c["values"]): int(c["counts"]) for c in counts})


def batches(table: Table, columns: Sequence[str] | None = None, *, snapshot_id: int | None = None) -> Iterator[Any]:
    """The rows of `scan` as pyarrow record batches, read one file at a time (a large table's replay)."""
    from pyiceberg.expressions import AlwaysTrue

    selected = tuple(columns) if columns is not None else ("*",)
    try:
        reader = table.scan(row_filter=AlwaysTrue(), selected_fields=selected,
                            snapshot_id=snapshot_id).to_arrow_batch_reader()
        yield from reader
    except Exception as exc:
        raise _read_error(exc, table, "cannot be read") from exc
