"""The Iceberg catalog as pyiceberg reaches it, for reading landed tables back without Spark
(`mqbridge.landing.iceberg_read`): `[spark.iceberg]` names the catalog as Java's Iceberg does
(`jdbc:sqlite:/path`, `jdbc:postgresql://host:port/db`, `thrift://host:9083`, `http(s)://...`);
`pyiceberg_properties` says the same catalog in pyiceberg's words (its SqlCatalog on SQLAlchemy, its
Hive and REST catalogs), and `open_catalog` loads it under `ICEBERG_CATALOG`: Java's JdbcCatalog keeps
the Spark catalog's name in its `catalog_name` column, and pyiceberg's SqlCatalog sees only the rows of
its own name. A reader never changes the catalog (`init_catalog_tables` off: pyiceberg would otherwise
create its tables in a catalog Spark has not written yet). Java's JdbcCatalog creates its tables in its
"V0" layout (no `iceberg_type` column), which pyiceberg reads as is (its warning about it is not passed on).
A table is `(namespace, table)` in that catalog (`load_table`).

Errors: a catalog that does not answer is an outage (`IcebergCatalogUnavailableError`, a
`SinkOutageError`: nothing about any message), one that refuses the credentials a configuration
error (`ConfigError`); a table that is not there `IcebergTableMissingError`. Each names the catalog by
its URI with the password left out (`shown_uri`); no error or log line carries a password, key or
token (`CatalogProperties` hides them in its repr as well).

Object stores: an `s3a://` warehouse is passed on with the S3 settings pyiceberg's PyArrow FileIO takes
(`_s3_properties`: the endpoint, path-style or virtual-hosted addressing, the region, the keys and
timeouts, from the delta-rs options the warehouse's `ObjectStoreUri` carries, themselves built from
the `[spark.conf]` S3A keys the bridge's Spark uses), so that pyiceberg reads the table's metadata and
data files where Spark wrote them (tests/integration/test_iceberg_object_stores.py). HDFS would need
pyarrow's libhdfs and is refused at load (`config.iceberg.store_problems`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from pydantic import SecretStr

from mqbridge.config.iceberg import ICEBERG_CATALOG
from mqbridge.config.warehouse import Location, ObjectStoreUri
from mqbridge.errors import BridgeError, ConfigError, SinkOutageError

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

    from mqbridge.config.iceberg import IcebergCatalog


#: What says to install pyiceberg.
INSTALL = 'pip install "mqbridge[iceberg]" (pyiceberg)'
#: The properties whose values are secrets (shown as "***"); the password of a SQL catalog is in its `uri`.
SECRET_PROPERTIES = frozenset({"auth.basic.password", "credential", "token", "s3.access-key-id",
                               "s3.secret-access-key", "s3.session-token"})
#: How long a connection to a PostgreSQL catalog may take before the catalog counts as not answering.
CONNECT_TIMEOUT = 10
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
    # No region: pyiceberg would ask AWS for the bucket's (a request to s3.amazonaws.com, wrong for another
    # server); S3A signs for us-east-1 then, and so does this reader.
    found["s3.region"] = options.get("AWS_REGION") or "us-east-1"
    for option, setting in (("AWS_ACCESS_KEY_ID", "s3.access-key-id"),
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
    detail = _redacted(error_line(exc), properties)
    where = catalog_name(properties)
    if isinstance(exc, ice.NoSuchTableError | ice.NoSuchNamespaceError | ice.NoSuchIcebergTableError):
        return IcebergTableMissingError(f"{where}: {doing}: {detail}")
    lowered = detail.lower()
    if isinstance(exc, ice.UnauthorizedError | ice.ForbiddenError | ice.OAuthError) or any(
            word in lowered for word in ("password authentication failed", "authentication failed",
                                         "permission denied", "no password supplied", "role \"")):
        return ConfigError(f"{where} refuses the credentials of [spark.iceberg] ({doing}): {detail}")
    return IcebergCatalogUnavailableError(f"{where} {doing}: {detail}")


def error_line(exc: BaseException) -> str:
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
        raise _catalog_error(exc, catalog.properties,
                             f"cannot say whether {shown_identifier(identifier)} exists") from exc


def load_table(catalog: Catalog, identifier: tuple[str, str]) -> Table:
    """The table `identifier` (namespace, table) of `catalog` as its current metadata says;
    IcebergTableMissingError when it is not there, IcebergCatalogUnavailableError when the catalog
    or the table's metadata file cannot be read."""
    try:
        return catalog.load_table(identifier)
    except Exception as exc:
        raise _catalog_error(exc, catalog.properties, f"cannot load the table {shown_identifier(identifier)}") from exc


def table_at(location: Location) -> Table | None:
    """The Iceberg table at `location` as pyiceberg loads it through the loaded configuration's catalog
    (`mqbridge.config.iceberg.bound`: its name there is `location`'s directory under the warehouse); None
    when the catalog or the table is not there yet."""
    from mqbridge.config.iceberg import bound

    catalog = bound()
    try:
        return load_table(open_catalog(catalog_properties(catalog)), (catalog.namespace, catalog.name_of(location)))
    except IcebergTableMissingError:
        return None


def is_table_on_store(location: ObjectStoreUri) -> bool:
    """Whether `location`, on an object store, is a table of the loaded configuration's Iceberg catalog on
    its warehouse (`table_at`; an outage of the catalog or the store raised as one)."""
    from mqbridge.config.iceberg import bound_or_none

    catalog = bound_or_none()
    return catalog is not None and catalog.on_store(location) and table_at(location) is not None


def shown_identifier(identifier: tuple[str, str]) -> str:
    return ".".join((ICEBERG_CATALOG, *identifier))


