"""`[spark] warehouse`: a local directory, or a URI of an object store (S3 through Hadoop's S3A) or of
HDFS, where Delta tables land.

    warehouse = "data/landing"                        # a directory (relative to the file's)
    warehouse = "s3a://bucket/prefix"                 # S3 or an S3-compatible server, through S3A
    warehouse = "hdfs://namenode:8020/mqbridge"       # HDFS (a nameservice id for an HA pair)

A URI is kept as written (`ObjectStoreUri`, a `str`: Spark and delta-rs take it as it is; `/` joins a
table name) rather than made a `Path`, which would fold `s3a://bucket` into `s3a:/bucket`. `s3://` and
`s3n://` are refused naming `s3a://` (Spark has no file system for them but through Amazon's EMR);
any other scheme (`gs://`, `abfss://`, `file://`...) is refused saying what is supported: other
Hadoop file systems may work, but nothing here tests them.

An object store or HDFS holds only what commits by the table's own transaction: Delta tables
(`object_store_problems` refuses the rest at load, each naming the fix): Parquet directories are
published by renames on a local file system; the pyarrow writer writes local files, and free disk
space is not measured there. `[spark] catalog = true` registers a Delta table there by its URI (the
metastore keeps `LOCATION 's3a://…'` as written); the tables a template (`table = "orders_{destination}"`)
rendered are found by listing the store through delta-rs (`mqbridge.landing.tables`). The purge, the
compaction, replay, `where`, `tables` and `ledger --verify` / `--abandon` read and maintain Delta
tables there: Spark through S3A or HDFS, delta-rs with the `StorageOptions` an `ObjectStoreUri`
carries (`with_storage`, built by `delta_rs_options` from the same `[spark.conf]` S3A keys).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path, PurePath, PurePosixPath
from typing import Annotated, Any, Protocol, TypeAlias
from urllib.parse import urlsplit

from pydantic import BeforeValidator, GetCoreSchemaHandler
from pydantic_core import core_schema

from mqbridge.config.compaction import CompactionSection
from mqbridge.config.plaintext import is_loopback
from mqbridge.config.types import TypeConfig
from mqbridge.errors import Loc

#: The URI schemes a warehouse may have, with what each names.
SCHEMES = {"s3a": "s3a://BUCKET[/PREFIX]", "hdfs": "hdfs://NAMENODE[:PORT]/PATH"}
#: What a refused scheme's message says is supported.
SUPPORTED = ('a local directory, s3a://BUCKET[/PREFIX] (S3 or an S3-compatible server) or '
             'hdfs://NAMENODE[:PORT]/PATH')
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):")  # two letters at least: C:\data is a Windows path
#: S3 bucket names (the rules for new buckets: 3-63 characters, lower case, digits, '.', '-').
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_HOST = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*")
#: One directory of a prefix or a path (Hadoop's Path refuses ':' in a name; spaces are a quoting trap).
_SEGMENT = re.compile(r"[A-Za-z0-9_.=-]+")
#: The S3A settings whose values are credentials (any one set means the bridge sends keys).
S3A_KEYS = ("access.key", "secret.key", "session.token")


class StorageOptions(Mapping[str, str]):
    """delta-rs's `storage_options` for one object store (`delta_rs_options`): a read-only mapping
    whose `repr` and `str` name its keys and never show a credential's value (they end up in
    logs and error messages when an object holding them is printed)."""

    #: The keys whose values are shown as "***".
    SECRET_KEYS = frozenset({"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"})

    __slots__ = ("_values",)

    def __init__(self, values: Mapping[str, str] | None = None) -> None:
        self._values = dict(values or {})

    def __getitem__(self, key: str) -> str:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={'***' if k in self.SECRET_KEYS else repr(v)}" for k, v in sorted(self._values.items()))
        return f"StorageOptions({shown})"

    __str__ = __repr__

    def __reduce__(self) -> Any:  # never pickled with the secret (a child process builds its own)
        raise TypeError("StorageOptions hold credentials: they are not pickled")


class ObjectStoreUri(str):
    """A warehouse, or a table in it, on an object store or HDFS: `s3a://bucket/prefix/orders`.
    A `str`, so that Spark, delta-rs and log lines take it as written; `uri / "orders"` is the
    URI of a table under it. Made by `parse_warehouse`, which checks it.

    It may carry the delta-rs `storage_options` of its store (`with_storage`; `/` passes them on to
    a table's URI), so that a reader given a table's location reaches it as Spark does. They are
    not part of its text, its `repr`, its equality or a pickle of it."""

    _storage: StorageOptions

    def with_storage(self, options: Mapping[str, str]) -> ObjectStoreUri:
        """This URI carrying delta-rs `options` (`delta_rs_options`)."""
        uri = ObjectStoreUri(self)
        uri._storage = options if isinstance(options, StorageOptions) else StorageOptions(options)
        return uri

    @property
    def storage_options(self) -> StorageOptions:
        """The delta-rs `storage_options` this URI carries (none: empty)."""
        return getattr(self, "_storage", None) or StorageOptions()

    @property
    def name(self) -> str:
        """The last segment of the path (a table's name), as `Path.name`."""
        return self.rstrip("/").rsplit("/", 1)[-1]

    def relative_to(self, other: str | PurePath) -> PurePosixPath:
        """The path of this URI under `other` (a warehouse), as `Path.relative_to`; ValueError when
        it is not under it."""
        base = str(other).rstrip("/") + "/"
        if not self.startswith(base):
            raise ValueError(f"{self} is not under {other}")
        return PurePosixPath(self[len(base):])

    def __reduce__(self) -> Any:  # its text only: the storage options never travel in a pickle
        return ObjectStoreUri, (str(self),)

    @property
    def scheme(self) -> str:
        """`s3a` or `hdfs`."""
        return self.split("://", 1)[0]

    @property
    def authority(self) -> str:
        """The bucket of `s3a://`, the namenode (host[:port]) or nameservice of `hdfs://`."""
        return self.split("://", 1)[1].split("/", 1)[0]

    @property
    def bucket(self) -> str | None:
        """The S3 bucket (None for HDFS)."""
        return self.authority if self.scheme == "s3a" else None

    def __truediv__(self, name: str) -> ObjectStoreUri:
        uri = ObjectStoreUri(f"{self.rstrip('/')}/{str(name).strip('/')}")
        storage = getattr(self, "_storage", None)
        return uri.with_storage(storage) if storage else uri

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        # Made by `parse_warehouse` (the field's before-validator); shown and dumped as its text.
        return core_schema.is_instance_schema(cls, serialization=core_schema.plain_serializer_function_ser_schema(str))


def parse_warehouse(value: object) -> Path | ObjectStoreUri:
    """`value` as a warehouse: a `Path`, or an `ObjectStoreUri` for `s3a://` and `hdfs://`. Raises
    ValueError naming the fix for any other scheme, a malformed URI, or credentials written into it
    (which the message never repeats)."""
    if isinstance(value, ObjectStoreUri | Path):
        return value
    if not isinstance(value, str):
        raise ValueError("must be a directory or a URI (a string)")
    match = _SCHEME.match(value)
    if match is None:
        return Path(value)
    scheme = match[1].lower()
    if scheme in ("s3", "s3n"):
        raise ValueError(f"{scheme}:// is not a file system of Spark's: write s3a://BUCKET/PREFIX (Hadoop's S3A "
                         "connector, for S3 and S3-compatible servers)")
    if scheme == "file":
        raise ValueError("write the directory itself, not a file:// URI (e.g. warehouse = \"/srv/mqbridge/landing\")")
    if scheme not in SCHEMES:
        raise ValueError(f"{scheme}:// is not supported: a warehouse is {SUPPORTED}; other Hadoop file systems "
                         "(gs://, abfss://, ...) may work with their connector but are not tested with mqbridge, "
                         "so they are refused")
    return ObjectStoreUri(_checked_uri(value, scheme))


def _checked_uri(text: str, scheme: str) -> str:
    """`text` (a URI of `scheme`) as kept: the scheme in lower case, no trailing '/'. ValueError if
    it is not of the form of `SCHEMES`."""
    form = SCHEMES[scheme]
    if not text[len(scheme) + 1:].startswith("//"):
        raise ValueError(f"a warehouse URI is {form} (two slashes after the colon)")
    parts = urlsplit(text)
    if "@" in parts.netloc:
        raise ValueError(f"a warehouse URI holds no credentials (it is shown in logs and on the status page): write "
                         f"{form} and give the keys in [spark.conf] as ${{FILE:...}} or ${{ENV:...}} "
                         "(docs/spark-and-tables.md, \"Object stores and HDFS\")")
    if parts.query or parts.fragment:
        raise ValueError(f"a warehouse URI is {form}, without '?' or '#'")
    segments = [s for s in parts.path.split("/") if s]
    bad = [s for s in segments if not _SEGMENT.fullmatch(s) or s in (".", "..")]
    if bad or "//" in parts.path:
        raise ValueError(f"{text!r}: each directory of the path is letters, digits, '_', '.', '=' and '-', not '.' "
                         "or '..', with single slashes between them")
    if scheme == "s3a":
        if not _BUCKET.fullmatch(parts.netloc) or ".." in parts.netloc:
            raise ValueError(f"{text!r}: {parts.netloc!r} is not an S3 bucket name (3-63 characters: lower-case "
                             "letters, digits, '.' and '-'); write s3a://BUCKET[/PREFIX]")
    else:
        host, _, port = parts.netloc.partition(":")
        if not host or not _HOST.fullmatch(host) or (port and not (port.isdigit() and 0 < int(port) < 65536)):
            raise ValueError(f"{text!r}: write {form}, naming the namenode (or the nameservice of an HA pair); "
                             "hdfs:///PATH (the default file system) is not accepted: the warehouse says where it is")
    return f"{scheme}://{parts.netloc}" + "".join(f"/{s}" for s in segments)


#: `[spark] warehouse`'s type: a directory or an object store's URI (`parse_warehouse`).
Warehouse = Annotated[Path | ObjectStoreUri, BeforeValidator(parse_warehouse)]
#: Where a table is: a local directory, or its URI on an object store or HDFS.
Location: TypeAlias = Path | ObjectStoreUri


def s3a_setting(conf: Mapping[str, str], bucket: str | None, name: str) -> str | None:
    """The S3A setting `fs.s3a.<name>` for `bucket` in Spark settings `conf`: the bucket's own
    (`spark.hadoop.fs.s3a.bucket.<bucket>.<name>`, which S3A prefers) or the general one."""
    if bucket is not None:
        own = conf.get(f"spark.hadoop.fs.s3a.bucket.{bucket}.{name}")
        if own is not None:
            return own
    return conf.get(f"spark.hadoop.fs.s3a.{name}")


def s3a_endpoint(conf: Mapping[str, str], bucket: str | None) -> tuple[str, bool]:
    """(the endpoint S3A sends `bucket`'s requests to, as an operator reads it, whether it is over
    TLS): `fs.s3a.endpoint` (a URL, or a host whose scheme `fs.s3a.connection.ssl.enabled` chooses,
    https by default), or AWS's own when none is set."""
    endpoint = (s3a_setting(conf, bucket, "endpoint") or "").strip()
    if not endpoint:
        return "the AWS S3 endpoint", True
    if "://" in endpoint:
        return _without_userinfo(endpoint), endpoint.lower().startswith("https://")
    tls = (s3a_setting(conf, bucket, "connection.ssl.enabled") or "true").strip().lower() != "false"
    return f"{'https' if tls else 'http'}://{_without_userinfo(endpoint)}", tls


def _without_userinfo(url: str) -> str:
    scheme, sep, rest = url.rpartition("://")
    host, slash, path = rest.partition("/")
    return f"{scheme}{sep}{host.rpartition('@')[2]}{slash}{path}"


def s3a_keys_set(conf: Mapping[str, str], bucket: str | None) -> bool:
    """Whether `conf` gives S3A keys for `bucket` (its own or the general ones)."""
    return any(s3a_setting(conf, bucket, key) for key in S3A_KEYS)


#: delta-rs's retries and timeouts on S3 (its object store client's own: 10 retries within 180 s), bounded
#: as the bridge bounds S3A's (`mqbridge.landing.object_stores.S3A_CONF`): a command reading a table on an
#: endpoint that is down says so within seconds (a closed port: 0.1 s with these, 3 s with delta-rs's own)
#: rather than after minutes; a request may take a minute (a reader's whole column of a large file).
DELTA_RS_TIMEOUTS = {"max_retries": "2", "retry_timeout": "60s", "connect_timeout": "15s", "timeout": "60s"}


def delta_rs_options(warehouse: ObjectStoreUri, conf: Mapping[str, str]) -> StorageOptions:
    """delta-rs's `storage_options` for `warehouse` from the S3A settings of `conf` (`[spark] conf`,
    resolved: the keys come from `${FILE:}`/`${ENV:}` as the driver's do), so that a delta-rs reader
    reaches the bucket as Spark does: the endpoint (the bucket in its host name unless
    `fs.s3a.path.style.access`, as S3A sends it), its region, the keys and session token, plain http
    allowed only for an http endpoint. None for HDFS: delta-rs's client reads the namenode from the
    URI (and a nameservice from HADOOP_CONF_DIR, as Hadoop does)."""
    bucket = warehouse.bucket
    if bucket is None:
        return StorageOptions()
    options: dict[str, str] = {}
    endpoint = (s3a_setting(conf, bucket, "endpoint") or "").strip()
    path_style = (s3a_setting(conf, bucket, "path.style.access") or "false").strip().lower() == "true"
    if endpoint:
        url, tls = s3a_endpoint(conf, bucket)
        if "://" not in endpoint:
            url = f"{'https' if tls else 'http'}://{endpoint}"
        if not path_style:  # virtual-hosted: delta-rs expects the bucket's own endpoint
            scheme, _, rest = url.partition("://")
            url = f"{scheme}://{bucket}.{rest}"
        options["AWS_ENDPOINT_URL"] = url.rstrip("/")
        if not tls:
            options["AWS_ALLOW_HTTP"] = "true"
    options["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = "false" if path_style else "true"
    region = s3a_setting(conf, bucket, "endpoint.region")
    if region:
        options["AWS_REGION"] = region.strip()
    for s3a, rs in (("access.key", "AWS_ACCESS_KEY_ID"), ("secret.key", "AWS_SECRET_ACCESS_KEY"),
                    ("session.token", "AWS_SESSION_TOKEN")):
        value = s3a_setting(conf, bucket, s3a)
        if value:
            options[rs] = value
    if s3a_keys_set(conf, bucket):  # the configured keys only: never the EC2 metadata service
        options["AWS_EC2_METADATA_DISABLED"] = "true"
    return StorageOptions({**DELTA_RS_TIMEOUTS, **options})


def plaintext_s3_host(conf: Mapping[str, str], bucket: str) -> str | None:
    """The host S3A sends `bucket`'s signed requests to without TLS while keys are configured, or
    None (TLS, no keys, or the AWS endpoint)."""
    endpoint, tls = s3a_endpoint(conf, bucket)
    if tls or not s3a_keys_set(conf, bucket) or "://" not in endpoint:
        return None
    return urlsplit(endpoint).hostname or ""


class SparkSettings(Protocol):
    """What `object_store_problems` reads of `[spark]` (`config.schema.SparkSection`)."""

    @property
    def warehouse(self) -> Path | ObjectStoreUri: ...
    @property
    def table_format(self) -> str: ...
    @property
    def writer(self) -> str: ...
    @property
    def conf(self) -> Mapping[str, str]: ...
    @property
    def allow_plaintext_password(self) -> bool: ...


class PurgeSettings(Protocol):
    """What `object_store_problems` reads of `[purge]` (`config.schema.PurgeSection`)."""

    @property
    def min_free_disk(self) -> int | None: ...


def object_store_problems(spark: SparkSettings, types: Mapping[str, TypeConfig], compaction: CompactionSection,
                          purge: PurgeSettings | None = None) -> list[tuple[Loc, str]]:
    """What a configuration (`[spark]`, `[types.*]`, `[compaction]`, `[purge]`) asks of an object-store or HDFS
    warehouse that is not supported there, each with its key and fix (nothing for a local warehouse).
    The retention purge, `[purge] interval` and `[compaction] interval` are supported there (Delta's
    own DELETE, copy, OPTIMIZE and VACUUM through S3A or HDFS), and so are `[spark] catalog` (a Delta
    table registered by its URI) and table templates (their tables listed on the store)."""
    warehouse = spark.warehouse
    if not isinstance(warehouse, ObjectStoreUri):
        return []
    where = f"on {warehouse.scheme}:// (warehouse = {warehouse})"
    later = f"not supported {where} yet"
    problems: list[tuple[Loc, str]] = []
    inherit = sorted(n for n, t in types.items() if t.table_format is None)
    if spark.table_format == "parquet" and inherit:
        problems.append((("spark", "table_format"), f'"parquet" (the types {", ".join(inherit)} land so) cannot '
                         f"land {where}: Parquet tables are published by renames on a local file system; set "
                         'table_format = "delta"'))
    for name, type_cfg in types.items():
        if type_cfg.table_format == "parquet":
            problems.append((("types", name, "table_format"), f'"parquet" cannot land {where}: Parquet tables are '
                             'published by renames on a local file system; set table_format = "delta"'))
    if compaction.min_free_disk is not None:
        problems.append((("compaction", "min_free_disk"), f"free space is not measured {where}: remove it (the "
                         "store's own quota or the namenode's capacity is the limit there)"))
    if purge is not None and purge.min_free_disk is not None:
        problems.append((("purge", "min_free_disk"), f"free space is not measured {where}, so no rows can be "
                         "designated by it: remove it, and cap the tables with [types.X] max_rows instead (the "
                         "store's own quota or the namenode's capacity is the limit there)"))
    if spark.writer != "spark":
        problems.append((("spark", "writer"), f'writer = "{spark.writer}" (pyarrow writes local files) is {later}: '
                         'set writer = "spark"'))
    bucket = warehouse.bucket
    host = plaintext_s3_host(spark.conf, bucket) if bucket is not None else None
    if host is not None and not is_loopback(host) and not spark.allow_plaintext_password:
        endpoint, _ = s3a_endpoint(spark.conf, bucket)
        problems.append((("spark", "conf"), f"S3 keys are configured for bucket {bucket} but its endpoint {endpoint} "
                         "is not TLS: the landed messages, the access key and any session token would travel in "
                         f"clear to {host} (requests are signed, the secret key itself is not sent); use an https:// "
                         "endpoint (fs.s3a.endpoint), or set [spark] allow_plaintext_password = true to accept the "
                         "risk"))
    return problems
