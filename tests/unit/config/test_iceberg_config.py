"""`table_format = "iceberg"` and `[spark.iceberg]` (config.iceberg): accepted in `[spark]` and per type;
refused with a reason for what is not built (a Spark Connect `remote`; on an s3a:// warehouse the embedded
catalog, other formats beside; HDFS; the purge, the compaction and table templates are accepted on a
local and an s3a:// warehouse) and for a catalog password that would travel in clear; and the
catalog's Spark settings (`mqbridge.landing.iceberg.session_conf`), whose password is named like a
credential (so it reaches the driver JVM in a private file, never on its command line)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqbridge.config import BridgeConfig, parse_config
from mqbridge.config.iceberg import ICEBERG_CATALOG, bound
from mqbridge.config.schema import SECRET_CONF_KEY
from mqbridge.config.warehouse import ObjectStoreUri
from mqbridge.errors import ConfigError
from mqbridge.landing import iceberg

BASE = """
[sources.src]
kind = "stomp"
[[listeners]]
source = "src"
queue = "ORDERS"
message_type = "orders"
backout_queue = "ORDERS.BACKOUT"
"""
SECRET = "catalog-secret-42"


def parse(text: str, tmp_path: Path | None = None) -> BridgeConfig:
    path = str(tmp_path / "bridge.toml") if tmp_path is not None else "bridge.toml"
    return parse_config(BASE + text, path, env={"PW": SECRET})


def refused(text: str) -> str:
    with pytest.raises(ConfigError) as info:
        parse(text)
    message = str(info.value)
    assert SECRET not in message and "\n" not in message
    return message


def test_iceberg_is_a_table_format_of_spark_and_of_a_type() -> None:
    config = parse('[spark]\ntable_format = "iceberg"\n[types.orders]\n[types.other]\ntable_format = "iceberg"\n')
    assert config.spark.table_format == "iceberg" and config.types["other"].table_format == "iceberg"
    assert config.spark.iceberg.catalog == "jdbc" and config.spark.iceberg.namespace == "mqbridge"


def test_the_embedded_catalog_is_sqlite_under_the_warehouse_and_bound_when_loaded(tmp_path: Path) -> None:
    """Beside the tables it describes, not under state_dir: a wiped state_dir keeps the tables' catalog."""
    config = parse('[bridge]\nstate_dir = "st"\n[spark]\ntable_format = "iceberg"\nwarehouse = "wh"\n'
                   "[types.orders]\n", tmp_path)
    catalog = bound()
    assert catalog == config.iceberg_catalog()
    assert catalog.uri == f"jdbc:sqlite:{tmp_path / 'wh' / '_iceberg' / 'catalog.db'}"
    assert catalog.identifier("orders") == f"{ICEBERG_CATALOG}.mqbridge.`orders`"


def test_a_spark_connect_remote_is_refused_with_iceberg_types_and_says_why() -> None:
    message = refused('[spark]\nremote = "sc://127.0.0.1:15002"\n[types.orders]\ntable_format = "iceberg"\n')
    assert "spark.remote" in message and "no idempotent append" in message


@pytest.mark.parametrize("text", [
    "[types.orders]\ntable_format = \"iceberg\"\nretention = \"7d\"\n",
    "[types.orders]\ntable_format = \"iceberg\"\nmax_rows = 10\n",
    "[spark]\ntable_format = \"iceberg\"\n[types.orders]\nretention = \"7d\"\n[compaction]\ninterval = \"1h\"\n",
])
def test_the_purge_and_the_compaction_of_iceberg_types_are_accepted(text: str) -> None:
    """Built on Iceberg's own commits (`mqbridge.maintenance.iceberg`): no longer refused."""
    config = parse(text)
    assert config.types["orders"].retention is not None or config.types["orders"].max_rows == 10


def test_the_purge_of_parquet_types_beside_iceberg_ones_is_accepted() -> None:
    config = parse('[types.orders]\ntable_format = "iceberg"\n[types.old]\nretention = "7d"\n')
    assert config.types["old"].retention is not None


S3 = '[spark]\nwarehouse = "s3a://bucket/landing"\ntable_format = "iceberg"\nwriter = "spark"\n'
PG = '[spark.iceberg]\nuri = "jdbc:postgresql://127.0.0.1:5432/iceberg"\n'


def test_an_s3a_warehouse_without_a_catalog_uri_is_refused_naming_the_key() -> None:
    """The embedded SQLite catalog cannot live on S3, and in state_dir a wiped state_dir would lose the tables."""
    message = refused(S3 + "[types.orders]\n")
    assert "spark.iceberg.uri" in message and "catalog server" in message and "wiped state_dir" in message


def test_an_s3a_warehouse_with_a_catalog_uri_lands_iceberg_tables_there() -> None:
    config = parse(S3 + '[spark.conf]\n"spark.hadoop.fs.s3a.endpoint" = "http://127.0.0.1:9000"\n'
                   '"spark.hadoop.fs.s3a.path.style.access" = "true"\n' + PG + "[types.orders]\n")
    catalog = bound()
    assert catalog == config.iceberg_catalog() and catalog.lands_on_store
    assert str(catalog.warehouse) == "s3a://bucket/landing" and catalog.uri.startswith("jdbc:postgresql:")
    assert catalog.warehouse.storage_options["AWS_ENDPOINT_URL"] == "http://127.0.0.1:9000"  # type: ignore[union-attr]
    table = catalog.warehouse / "orders"
    assert catalog.on_store(table) and catalog.name_of(table) == "orders"
    assert not catalog.on_store(ObjectStoreUri("s3a://other/orders")) and not catalog.on_store(Path("/wh/orders"))
    conf = iceberg.catalog_conf(catalog)
    assert conf[f"spark.sql.catalog.{ICEBERG_CATALOG}.warehouse"] == "s3a://bucket/landing"


def test_a_table_on_the_store_of_the_iceberg_types_is_an_iceberg_one_and_a_delta_store_stays_delta() -> None:
    from mqbridge.table_formats import format_of

    parse(S3 + PG + "[types.orders]\n")
    assert format_of(ObjectStoreUri("s3a://bucket/landing/orders")).name == "iceberg"
    parse('[spark]\nwarehouse = "s3a://bucket/landing"\ntable_format = "delta"\nwriter = "spark"\n[types.orders]\n')
    assert format_of(ObjectStoreUri("s3a://bucket/landing/orders")).name == "delta"


def test_a_delta_type_beside_iceberg_ones_on_an_s3a_warehouse_is_refused_naming_the_key() -> None:
    message = refused(S3 + PG + '[types.orders]\n[types.old]\ntable_format = "delta"\n')
    assert "spark.warehouse" in message, message


def test_a_table_template_of_iceberg_tables_on_an_s3a_warehouse_is_accepted() -> None:
    """Its tables are found by listing the store and asking the catalog (`mqbridge.landing.tables`)."""
    config = parse(S3 + PG + '[types.orders]\ntable = "t_{destination}"\n')
    assert config.types["orders"].table == "t_{destination}"


@pytest.mark.parametrize("text", ['[types.orders]\nretention = "7d"\n', "[types.orders]\nmax_rows = 10\n",
                                  '[types.orders]\nretention = "7d"\n[compaction]\ninterval = "1h"\n'])
def test_the_purge_and_the_compaction_of_iceberg_tables_on_an_s3a_warehouse_are_accepted(text: str) -> None:
    config = parse(S3 + PG + text)
    assert config.types["orders"].retention is not None or config.types["orders"].max_rows == 10


def test_an_hdfs_warehouse_is_refused_for_iceberg_types() -> None:
    message = refused('[spark]\nwarehouse = "hdfs://nn:8020/landing"\ntable_format = "iceberg"\n'
                      'writer = "spark"\n' + PG + "[types.orders]\n")
    assert "spark.warehouse" in message and "not built yet for Iceberg tables" in message


@pytest.mark.parametrize("uri", ["jdbc:postgresql://db.example.com:5432/iceberg",
                                 "jdbc:postgresql://db.example.com:5432/iceberg?sslmode=prefer",
                                 "http://catalog.example.com/iceberg"])
def test_a_password_to_a_remote_catalog_without_tls_is_refused(uri: str) -> None:
    kind = "rest" if uri.startswith("http") else "jdbc"
    message = refused(f'[spark.iceberg]\ncatalog = "{kind}"\nuri = "{uri}"\nuser = "u"\npassword = "${{ENV:PW}}"\n'
                      "[types.orders]\n")
    assert "spark.iceberg.password" in message and "allow_plaintext_password" in message


@pytest.mark.parametrize("uri", ["jdbc:postgresql://db.example.com:5432/iceberg?sslmode=verify-full",
                                 "jdbc:postgresql://127.0.0.1:5432/iceberg"])
def test_a_password_over_tls_or_to_loopback_is_accepted(uri: str) -> None:
    config = parse(f'[spark.iceberg]\nuri = "{uri}"\nuser = "u"\npassword = "${{ENV:PW}}"\n[types.orders]\n')
    assert config.secrets()["spark.iceberg.password"] == SECRET


def test_allow_plaintext_password_accepts_the_risk() -> None:
    parse('[spark.iceberg]\nuri = "jdbc:postgresql://db.example.com/x"\npassword = "${ENV:PW}"\n'
          "allow_plaintext_password = true\n[types.orders]\n")


@pytest.mark.parametrize(("text", "said"), [
    ('catalog = "hive"\n', "needs its uri"),
    ('catalog = "rest"\nuri = "thrift://h:9083"\n', "starts with http:// or https://"),
    ('uri = "postgresql://h/db"\n', "starts with jdbc:sqlite: or jdbc:postgresql:"),
    ('namespace = "a.b"\n', "namespace"),
    ('catalog = "hive"\nuri = "thrift://h:9083"\npassword = "${ENV:PW}"\n', "a Hive metastore takes no password"),
    ('catalog = "rest"\nuri = "https://h/ice"\npassword = "${ENV:PW}"\n', "set [spark.iceberg] user"),
])
def test_a_catalog_that_cannot_be_reached_as_written_is_refused(text: str, said: str) -> None:
    assert said in refused(f"[spark.iceberg]\n{text}[types.orders]\n")


def test_the_session_gets_the_jars_the_merged_extensions_and_the_catalog_with_its_password_a_secret(
        tmp_path: Path) -> None:
    jars = tmp_path / "jars" / "iceberg"
    jars.mkdir(parents=True)
    for name in ("iceberg-spark-runtime-4.1_2.13-1.12.0.jar", "sqlite-jdbc-3.54.1.0.jar", "postgresql-42.7.14.jar"):
        (jars / name).touch()
    config = parse('[spark.iceberg]\nuri = "jdbc:postgresql://127.0.0.1/x"\nuser = "u"\npassword = "${ENV:PW}"\n'
                   "[types.orders]\n", tmp_path)
    catalog = config.iceberg_catalog()
    assert catalog is not None
    conf = iceberg.session_conf(tmp_path / "jars", {"spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
                                                    "spark.jars": "/x.jar"}, catalog)
    assert conf["spark.sql.extensions"] == f"io.delta.sql.DeltaSparkSessionExtension,{iceberg.EXTENSION}"
    assert conf["spark.jars"].split(",")[0] == "/x.jar" and len(conf["spark.jars"].split(",")) == 4
    assert conf["spark.sql.catalog.mqbridge"] == "org.apache.iceberg.spark.SparkCatalog"
    assert conf["spark.sql.catalog.mqbridge.uri"] == "jdbc:postgresql://127.0.0.1/x"
    secret_keys = [k for k, v in conf.items() if v == SECRET]
    assert secret_keys == ["spark.sql.catalog.mqbridge.jdbc.password"]
    assert all(SECRET_CONF_KEY.search(k) for k in secret_keys)


def test_a_missing_iceberg_jar_is_a_configuration_error_naming_the_command(tmp_path: Path) -> None:
    config = parse("[types.orders]\n", tmp_path)
    catalog = config.iceberg_catalog()
    assert catalog is not None
    with pytest.raises(ConfigError, match="mqbridge jars iceberg"):
        iceberg.session_conf(tmp_path / "jars", {}, catalog)


def test_iceberg_types_with_a_ledger_other_hosts_may_share_are_not_warned_of() -> None:
    """Iceberg's appends are fenced by write-audit-publish now (`mqbridge.landing.iceberg`; docs/guarantees.md,
    "Two live bridges, one message"): `run` and `check-config` no longer warn of them with a shared ledger."""
    from mqbridge.lint import start_warnings

    ledger = '[ledger]\nurl = "postgresql://bridge@127.0.0.1:5432/db"\n'
    shared = parse(ledger + '[types.orders]\ntable_format = "iceberg"\n[types.other]\n')
    assert not [f for f in start_warnings(shared) if f.loc == ("ledger", "url")]


def test_partition_by_is_day_by_default_and_hour_is_accepted_for_iceberg_types() -> None:
    config = parse('[spark]\ntable_format = "iceberg"\n[types.orders]\n[types.hourly]\npartition_by = "hour"\n'
                   '[types.other]\ntable_format = "delta"\npartition_by = "day"\n')
    assert [config.types[n].partition_by for n in ("orders", "hourly", "other")] == ["day", "hour", "day"]


@pytest.mark.parametrize("text", ['[types.orders]\npartition_by = "hour"\n',
                                  '[spark]\ntable_format = "iceberg"\n[types.orders]\ntable_format = "delta"\n'
                                  'partition_by = "hour"\n'])
def test_hour_partitions_are_refused_for_parquet_and_delta_tables_naming_the_key(text: str) -> None:
    """Their put_date partition column is their layout; an hour column would be another table (Delta fixes
    generated and partition columns when it creates a table): refused, not half applied."""
    message = refused(text)
    assert "types.orders.partition_by" in message and '"hour" is for Iceberg tables' in message


def test_types_sharing_a_table_with_different_partitioning_are_refused() -> None:
    """Each process would evolve the one table's spec its own way, back and forth."""
    message = refused('[spark]\ntable_format = "iceberg"\n[types.orders]\ntable = "t"\n'
                      '[types.other]\ntable = "t"\npartition_by = "hour"\n')
    assert "types.other.partition_by" in message and "one table has one partitioning" in message


def test_an_unknown_partitioning_is_refused_naming_the_key() -> None:
    assert "types.orders.partition_by" in refused('[types.orders]\ntable_format = "iceberg"\npartition_by = "week"\n')
