"""`[spark] warehouse` as a directory or an object store's URI (config.warehouse): `s3a://` and
`hdfs://` kept as written (never folded into a Path), other schemes refused naming what is supported,
credentials in the URI refused without repeating them; on an object store or HDFS, what only a local
warehouse supports is refused at load naming its key and fix (parquet, `[compaction]` and `[purge]
min_free_disk`, the pyarrow writer) while the retention purge, the scheduled purge and compaction, `[spark] catalog` (a
Delta table registered by its URI) and table templates (their tables listed on the store) are
accepted; S3 keys to an http:// endpoint that is not loopback refused unless allowed; delta-rs's
storage options built from the S3A settings (endpoint, path style, keys, plain http), which never show
a credential in their repr or str or travel in a pickle of the URI carrying them."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from mqbridge.config import BridgeConfig, SparkSection, plaintext_notes
from mqbridge.config.loader import parse_config
from mqbridge.config.warehouse import DELTA_RS_TIMEOUTS, ObjectStoreUri, delta_rs_options, parse_warehouse
from mqbridge.errors import ConfigError
from tests.unit.config.texts import LISTENER, SOURCE, error, parse

S3 = '[spark]\nwarehouse = "s3a://landing-bucket/mqbridge"\ntable_format = "delta"\n'
SECRET = "s3-secret-that-must-not-show-0123"


def config(spark: str = S3, types: str = "[types.orders]\n", extra: str = "") -> str:
    return spark + types + SOURCE + LISTENER + extra


def problems(text: str) -> str:
    message = error(text, {"S3_SECRET": SECRET})
    assert SECRET not in message
    return message


# -- the URI kept as written ----------------------------------------------------------------------
@pytest.mark.parametrize(("written", "kept", "authority"), [
    ("s3a://landing-bucket/mqbridge", "s3a://landing-bucket/mqbridge", "landing-bucket"),
    ("s3a://landing-bucket/a/b/", "s3a://landing-bucket/a/b", "landing-bucket"),
    ("S3A://landing-bucket", "s3a://landing-bucket", "landing-bucket"),
    ("hdfs://namenode:8020/data/landing", "hdfs://namenode:8020/data/landing", "namenode:8020"),
    ("hdfs://nameservice1/landing", "hdfs://nameservice1/landing", "nameservice1"),
])
def test_an_object_store_uri_is_kept_as_written(written: str, kept: str, authority: str) -> None:
    warehouse = SparkSection(warehouse=written).warehouse
    assert isinstance(warehouse, ObjectStoreUri) and warehouse == kept and warehouse.authority == authority
    assert warehouse / "orders" == f"{kept}/orders" and isinstance(warehouse / "orders", ObjectStoreUri)
    assert SparkSection(warehouse=written).model_dump(mode="json")["warehouse"] == kept


def test_a_directory_stays_a_path_and_the_config_resolves_each_kind() -> None:
    local = parse(config(spark='[spark]\nwarehouse = "data/landing"\n'))
    assert local.resolve_warehouse() == Path.cwd() / "data" / "landing"
    assert local.local_warehouse("`mqbridge tables`") == Path.cwd() / "data" / "landing"
    s3 = parse(config())
    assert s3.resolve_warehouse() == "s3a://landing-bucket/mqbridge"
    assert isinstance(s3.resolve_warehouse(), ObjectStoreUri)
    with pytest.raises(TypeError, match="resolve_warehouse"):
        s3.resolve_path(s3.spark.warehouse)  # a Path would fold s3a://bucket into s3a:/bucket


def test_a_command_that_reads_a_local_warehouse_refuses_an_object_store_in_one_line() -> None:
    cfg = parse(config())
    with pytest.raises(ConfigError) as info:
        cfg.local_warehouse("`mqbridge tables`")
    assert str(info.value) == ("demo.toml: spark.warehouse: `mqbridge tables` reads a local warehouse directory; "
                               "s3a://landing-bucket/mqbridge is on s3a://, which `mqbridge tables` does not support "
                               "yet (read its Delta tables with Spark or delta-rs)")


@pytest.mark.parametrize(("written", "said"), [
    ("s3://bucket-name/p", "s3:// is not a file system of Spark's: write s3a://BUCKET/PREFIX"),
    ("s3n://bucket-name/p", "s3n:// is not a file system of Spark's: write s3a://BUCKET/PREFIX"),
    ("gs://bucket-name/p", "gs:// is not supported: a warehouse is a local directory, s3a://BUCKET[/PREFIX]"),
    ("abfss://c@account.dfs.core.windows.net/p", "abfss:// is not supported"),
    ("file:///srv/landing", "write the directory itself, not a file:// URI"),
    ("s3a:/bucket-name/p", "a warehouse URI is s3a://BUCKET[/PREFIX] (two slashes after the colon)"),
    ("s3a://Bucket_Name/p", "'Bucket_Name' is not an S3 bucket name"),
    ("s3a://bucket-name/../p", "not '.' or '..'"),
    ("s3a://bucket-name//p", "single slashes"),
    ("s3a://bucket-name/p?x=1", "without '?' or '#'"),
    ("hdfs:///landing", "hdfs:///PATH (the default file system) is not accepted"),
    ("hdfs://namenode:99999/landing", "naming the namenode"),
])
def test_other_uris_are_refused_naming_what_is_supported(written: str, said: str) -> None:
    message = problems(config(spark=f'[spark]\nwarehouse = "{written}"\ntable_format = "delta"\n'))
    assert message.startswith("demo.toml: spark.warehouse: ") and said in message, message
    if "not supported" in said:
        assert "not tested with mqbridge" in message


def test_credentials_in_the_uri_are_refused_without_being_repeated() -> None:
    message = problems(config(spark=f'[spark]\nwarehouse = "s3a://AKIDEXAMPLE:{SECRET}@landing-bucket/p"\n'))
    assert "holds no credentials" in message and "AKIDEXAMPLE" not in message


def test_parse_warehouse_passes_paths_and_uris_through() -> None:
    uri = ObjectStoreUri("s3a://landing-bucket/p")
    assert parse_warehouse(uri) is uri and parse_warehouse(Path("x")) == Path("x")
    assert parse_warehouse(r"C:\data\landing") == Path(r"C:\data\landing")  # a drive letter is not a scheme


# -- what an object store refuses at load ---------------------------------------------------------
def test_parquet_is_refused_on_an_object_store_naming_delta() -> None:
    inherited = problems(config(spark='[spark]\nwarehouse = "s3a://landing-bucket/p"\n'))
    assert 'spark.table_format: "parquet" (the types orders land so) cannot land on s3a://' in inherited
    assert 'set table_format = "delta"' in inherited
    own = problems(config(types='[types.orders]\ntable_format = "parquet"\n'))
    assert 'types.orders.table_format: "parquet" cannot land on s3a:// (warehouse = s3a://landing-bucket/' \
           'mqbridge): Parquet tables are published by renames on a local file system; set table_format = ' \
           '"delta"' in own
    on_hdfs = problems(config(spark='[spark]\nwarehouse = "hdfs://namenode:8020/landing"\n'))
    assert "cannot land on hdfs://" in on_hdfs


def test_a_type_of_its_own_delta_format_lands_on_an_object_store() -> None:
    cfg = parse(config(spark='[spark]\nwarehouse = "s3a://landing-bucket/p"\n',
                       types='[types.orders]\ntable_format = "delta"\n'))
    assert cfg.types["orders"].table_format == "delta"


@pytest.mark.parametrize(("text", "key", "said"), [
    (config(extra='[compaction]\nmin_free_disk = "1GB"\n'), "compaction.min_free_disk", "free space is not measured"),
    (config(extra='[purge]\nmin_free_disk = "1GB"\n'), "purge.min_free_disk", "free space is not measured"),
    (config(spark=S3 + 'writer = "arrow"\n'), "spark.writer", 'writer = "arrow" (pyarrow writes local files)'),
    (config(spark=S3 + 'writer = "auto"\n'), "spark.writer", 'writer = "auto"'),
])
def test_what_only_a_local_warehouse_supports_is_refused_naming_its_key(text: str, key: str, said: str) -> None:
    message = problems(text)
    assert f"{key}: {said}" in message, message
    assert "not supported" in message or "not measured" in message


@pytest.mark.parametrize("warehouse", ["s3a://landing-bucket/mqbridge", "hdfs://namenode:8020/landing"])
def test_the_retention_purge_and_the_scheduled_purge_and_compaction_are_accepted_on_an_object_store(
        warehouse: str) -> None:
    cfg = parse(config(spark=f'[spark]\nwarehouse = "{warehouse}"\ntable_format = "delta"\n',
                       types='[types.orders]\nretention = "30d"\n',
                       extra='[purge]\ninterval = "1h"\n[compaction]\ninterval = "1h"\n'))
    assert cfg.types["orders"].retention == 30 * 86400.0
    assert cfg.purge.interval == 3600.0 and cfg.compaction.interval == 3600.0


@pytest.mark.parametrize("warehouse", ["s3a://landing-bucket/mqbridge", "hdfs://namenode:8020/landing"])
def test_the_catalog_is_accepted_on_an_object_store_or_hdfs(warehouse: str) -> None:
    # A Delta table there is registered by its URI (CREATE TABLE ... USING delta LOCATION 's3a://...')
    cfg = parse(config(spark=f'[spark]\nwarehouse = "{warehouse}"\ntable_format = "delta"\ncatalog = true\n'))
    assert cfg.spark.catalog


@pytest.mark.parametrize("warehouse", ["s3a://landing-bucket/mqbridge", "hdfs://namenode:8020/landing"])
def test_a_table_template_is_accepted_on_an_object_store_or_hdfs(warehouse: str) -> None:
    # The tables it rendered are listed on the store by delta-rs (mqbridge.landing.tables)
    cfg = parse(config(spark=f'[spark]\nwarehouse = "{warehouse}"\ntable_format = "delta"\n',
                       types='[types.orders]\ntable = "orders_{destination}"\n'))
    assert cfg.types["orders"].table == "orders_{destination}"


def test_the_same_settings_stay_accepted_on_a_local_warehouse() -> None:
    cfg = parse(config(spark='[spark]\nwarehouse = "data/landing"\ncatalog = true\nwriter = "auto"\n',
                       types='[types.orders]\nretention = "30d"\ntable = "{destination}"\n',
                       extra='[purge]\ninterval = "1h"\n[compaction]\ninterval = "1h"\n'))
    assert cfg.spark.catalog and cfg.purge.interval == 3600.0


# -- S3 keys without TLS (the plaintext rule of config.plaintext) --------------------------------
def s3_conf(endpoint: str, extra: str = "") -> str:
    return config(spark=S3 + f'allow_plaintext_password = false\n{extra}[spark.conf]\n'
                  f'"spark.hadoop.fs.s3a.endpoint" = "{endpoint}"\n'
                  '"spark.hadoop.fs.s3a.access.key" = "AKIDEXAMPLE"\n'
                  '"spark.hadoop.fs.s3a.secret.key" = "${ENV:S3_SECRET}"\n')


def test_s3_keys_to_an_http_endpoint_that_is_not_loopback_are_refused() -> None:
    message = problems(s3_conf("http://minio.example:9000"))
    assert ("spark.conf: S3 keys are configured for bucket landing-bucket but its endpoint "
            "http://minio.example:9000 is not TLS") in message
    assert "allow_plaintext_password = true" in message and "AKIDEXAMPLE" not in message


@pytest.mark.parametrize("endpoint", ["https://minio.example:9000", "http://127.0.0.1:9000", "http://localhost:9000"])
def test_s3_keys_over_tls_or_to_loopback_are_accepted(endpoint: str) -> None:
    assert parse(s3_conf(endpoint), {"S3_SECRET": SECRET}).spark.conf["spark.hadoop.fs.s3a.endpoint"] == endpoint


def test_an_endpoint_without_a_scheme_is_plaintext_when_ssl_is_disabled() -> None:
    text = s3_conf("minio.example:9000").replace(
        "[spark.conf]\n", '[spark.conf]\n"spark.hadoop.fs.s3a.connection.ssl.enabled" = "false"\n')
    assert "is not TLS" in problems(text)
    assert parse(s3_conf("minio.example:9000"), {"S3_SECRET": SECRET})  # S3A's default: TLS


def test_a_bucket_of_its_own_endpoint_is_the_one_checked() -> None:
    text = s3_conf("https://s3.example").replace(
        "[spark.conf]\n",
        '[spark.conf]\n"spark.hadoop.fs.s3a.bucket.landing-bucket.endpoint" = "http://10.1.2.3:9000"\n')
    assert "its endpoint http://10.1.2.3:9000 is not TLS" in problems(text)


def test_allowed_plaintext_keys_are_accepted_and_noted_at_start() -> None:
    cfg: BridgeConfig = parse(s3_conf("http://minio.example:9000").replace(
        "allow_plaintext_password = false", "allow_plaintext_password = true"), {"S3_SECRET": SECRET})
    notes = plaintext_notes(cfg)
    assert ("[spark.conf] S3 keys: requests signed with them, and the landed messages, travel without TLS to "
            "http://minio.example:9000 (allow_plaintext_password = true)") in notes
    loopback = parse(s3_conf("http://127.0.0.1:9000"), {"S3_SECRET": SECRET})
    assert any("(a loopback address: it does not leave this machine)" in n for n in plaintext_notes(loopback))
    assert not any(SECRET in n for n in notes)


# -- delta-rs's storage options from the S3A settings ---------------------------------------------
def s3a(**settings: str) -> dict[str, str]:
    return {f"spark.hadoop.fs.s3a.{k.replace('_', '.')}": v for k, v in settings.items()}


def test_storage_options_follow_the_s3a_settings_of_a_path_style_http_endpoint() -> None:
    uri = ObjectStoreUri("s3a://landing-bucket/mqbridge")
    options = delta_rs_options(uri, {**s3a(endpoint="http://127.0.0.1:9000", access_key="AKIDEXAMPLE"),
                                     "spark.hadoop.fs.s3a.secret.key": SECRET,
                                     "spark.hadoop.fs.s3a.path.style.access": "true",
                                     "spark.hadoop.fs.s3a.endpoint.region": "eu-west-1"})
    assert dict(options) == {**DELTA_RS_TIMEOUTS, "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
                             "AWS_ALLOW_HTTP": "true", "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false",
                             "AWS_REGION": "eu-west-1", "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE",
                             "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_EC2_METADATA_DISABLED": "true"}


def test_storage_options_of_a_virtual_hosted_tls_endpoint_and_a_bucket_of_its_own() -> None:
    uri = ObjectStoreUri("s3a://landing-bucket/mqbridge")
    conf = {**s3a(endpoint="minio.example:9000", access_key="GENERAL"),
            "spark.hadoop.fs.s3a.bucket.landing-bucket.access.key": "OWN",
            "spark.hadoop.fs.s3a.bucket.landing-bucket.session.token": "token-0123"}
    options = delta_rs_options(uri, conf)
    assert options["AWS_ENDPOINT_URL"] == "https://landing-bucket.minio.example:9000"  # the bucket's own host
    assert options["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] == "true" and "AWS_ALLOW_HTTP" not in options
    assert options["AWS_ACCESS_KEY_ID"] == "OWN" and options["AWS_SESSION_TOKEN"] == "token-0123"
    plain = delta_rs_options(uri, {**s3a(endpoint="minio.example:9000"),
                                   "spark.hadoop.fs.s3a.connection.ssl.enabled": "false"})
    assert plain["AWS_ENDPOINT_URL"] == "http://landing-bucket.minio.example:9000" and plain["AWS_ALLOW_HTTP"] == "true"
    assert "AWS_EC2_METADATA_DISABLED" not in plain  # no keys: delta-rs's own chain, as S3A's


def test_aws_itself_and_hdfs_need_no_endpoint() -> None:
    aws = delta_rs_options(ObjectStoreUri("s3a://landing-bucket/p"), {})
    assert "AWS_ENDPOINT_URL" not in aws and aws["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] == "true"
    assert dict(delta_rs_options(ObjectStoreUri("hdfs://namenode:8020/landing"), s3a(endpoint="x"))) == {}


def test_storage_options_never_show_or_pickle_a_credential() -> None:
    uri = ObjectStoreUri("s3a://landing-bucket/mqbridge")
    options = delta_rs_options(uri, {**s3a(endpoint="http://127.0.0.1:9000", access_key="AKIDEXAMPLE",
                                           session_token="token-0123"), "spark.hadoop.fs.s3a.secret.key": SECRET,
                                     "spark.hadoop.fs.s3a.path.style.access": "true"})
    table = uri.with_storage(options) / "orders"
    assert table == "s3a://landing-bucket/mqbridge/orders" and table.storage_options == options
    for shown in (repr(options), str(options), repr(table), str(table), f"{table}", repr(table.storage_options)):
        assert SECRET not in shown and "AKIDEXAMPLE" not in shown and "token-0123" not in shown, shown
    assert "AWS_SECRET_ACCESS_KEY=***" in repr(options) and "http://127.0.0.1:9000" in repr(options)
    copied = pickle.loads(pickle.dumps(table))
    assert copied == table and dict(copied.storage_options) == {}
    with pytest.raises(TypeError, match="not pickled"):
        pickle.dumps(options)


def test_the_tables_warehouse_carries_the_options_and_names_an_unresolved_secret() -> None:
    text = config(spark=S3 + '[spark.conf]\n"spark.hadoop.fs.s3a.endpoint" = "http://127.0.0.1:9000"\n'
                  '"spark.hadoop.fs.s3a.access.key" = "AKIDEXAMPLE"\n'
                  '"spark.hadoop.fs.s3a.secret.key" = "${ENV:S3_SECRET}"\n')
    warehouse = parse(text, {"S3_SECRET": SECRET}).tables_warehouse()
    assert isinstance(warehouse, ObjectStoreUri) and warehouse == "s3a://landing-bucket/mqbridge"
    assert (warehouse / "orders").storage_options["AWS_SECRET_ACCESS_KEY"] == SECRET
    unresolved = parse_config(text, "demo.toml", env={}, secrets=False)
    with pytest.raises(ConfigError, match="spark.conf") as info:
        unresolved.tables_warehouse()
    assert SECRET not in str(info.value)
    local = parse(config(spark='[spark]\nwarehouse = "data/landing"\n'))
    assert local.tables_warehouse() == Path.cwd() / "data" / "landing"
