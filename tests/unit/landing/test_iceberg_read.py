"""The Iceberg reader's catalog properties (`mqbridge.landing.iceberg_catalog.pyiceberg_properties`): each of
Java's catalog URIs `[spark.iceberg]` takes (`jdbc:sqlite:`, `jdbc:postgresql:`, `thrift://`, `http(s)://`)
said in pyiceberg's words, the JDBC parameters carried over or refused, the warehouse (a local
directory, an `s3a://` URI with its store's settings), and the password kept out of every text that
may be shown: the properties' repr, a URI in an error (`shown_uri`), a driver's error text."""

from __future__ import annotations

import base64
import http.server
import json
import pickle
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import SecretStr

from mqbridge.config.iceberg import IcebergCatalog, IcebergSection
from mqbridge.config.warehouse import ObjectStoreUri
from mqbridge.errors import ConfigError, SinkOutageError
from mqbridge.landing import iceberg_catalog
from mqbridge.landing.iceberg_catalog import pyiceberg_properties, shown_uri


def test_sqlite_catalog(tmp_path: Path) -> None:
    found = pyiceberg_properties("jdbc", f"jdbc:sqlite:{tmp_path}/catalog.db", warehouse=tmp_path / "warehouse")
    assert dict(found) == {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db", "init_catalog_tables": "false",
                           "warehouse": (tmp_path / "warehouse").as_uri()}
    assert found["uri"].startswith("sqlite:////")  # four slashes: an absolute path
    assert pyiceberg_properties("jdbc", f"jdbc:sqlite:file:{tmp_path}/c.db")["uri"] == f"sqlite:///{tmp_path}/c.db"


def test_a_relative_sqlite_path_is_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert pyiceberg_properties("jdbc", "jdbc:sqlite:state/catalog.db")["uri"] == f"sqlite:///{tmp_path}/state/catalog.db"


@pytest.mark.parametrize("uri", ["jdbc:sqlite::memory:", "jdbc:sqlite:/x/c.db?journal_mode=WAL", "jdbc:mysql://h/db"])
def test_jdbc_uris_refused(uri: str) -> None:
    with pytest.raises(ConfigError, match="Iceberg"):
        pyiceberg_properties("jdbc", uri)


def test_postgresql_catalog_with_user_and_password() -> None:
    found = pyiceberg_properties("jdbc", "jdbc:postgresql://db.example.com:5433/iceberg?sslmode=verify-full"
                                 "&sslrootcert=/etc/ca.pem", "bridge", SecretStr("p@ss:w/rd%"))
    assert found["uri"] == ("postgresql+psycopg2://bridge:p%40ss%3Aw%2Frd%25@db.example.com:5433/iceberg"
                            "?sslmode=verify-full&sslrootcert=/etc/ca.pem&connect_timeout=10")
    assert found["type"] == "sql"


def test_postgresql_jdbc_forms() -> None:
    assert pyiceberg_properties("jdbc", "jdbc:postgresql:iceberg")["uri"] == (
        "postgresql+psycopg2://localhost/iceberg?connect_timeout=10")
    assert pyiceberg_properties("jdbc", "jdbc:postgresql://h/db?ssl=true&connectTimeout=3&user=u&password=pw")[
        "uri"] == "postgresql+psycopg2://u:pw@h/db?sslmode=require&connect_timeout=3"
    assert pyiceberg_properties("jdbc", "jdbc:postgresql://[::1]:5432/db")["uri"].startswith(
        "postgresql+psycopg2://[::1]:5432/db")
    # The user and password given win over those of the URL
    assert pyiceberg_properties("jdbc", "jdbc:postgresql://h/db?user=u&password=old", "v", "new")["uri"].startswith(
        "postgresql+psycopg2://v:new@h/db")


def test_postgresql_unknown_parameters_and_several_hosts_refused() -> None:
    with pytest.raises(ConfigError, match="'currentSchema'"):
        pyiceberg_properties("jdbc", "jdbc:postgresql://h/db?currentSchema=ice")
    with pytest.raises(ConfigError, match="several hosts"):
        pyiceberg_properties("jdbc", "jdbc:postgresql://h1:5432,h2:5432/db", "u", "secret-9")


def test_hive_catalog() -> None:
    assert dict(pyiceberg_properties("hive", "thrift://metastore:9083")) == {"type": "hive",
                                                                            "uri": "thrift://metastore:9083"}
    with pytest.raises(ConfigError, match="takes no password") as refused:
        pyiceberg_properties("hive", "thrift://metastore:9083", "u", "secret-9")
    assert "secret-9" not in str(refused.value)


def test_rest_catalog_credentials() -> None:
    assert dict(pyiceberg_properties("rest", "https://cat.example.com/ice", "client", "s3cret")) == {
        "type": "rest", "uri": "https://cat.example.com/ice", "auth.type": "basic", "auth.basic.username": "client",
        "auth.basic.password": "s3cret"}
    assert dict(pyiceberg_properties("rest", "https://cat.example.com/ice")) == {
        "type": "rest", "uri": "https://cat.example.com/ice"}
    with pytest.raises(ConfigError, match="without a user") as refused:
        pyiceberg_properties("rest", "https://cat.example.com/ice", None, "tok-9")
    assert "tok-9" not in str(refused.value)
    with pytest.raises(ConfigError, match="http"):
        pyiceberg_properties("rest", "thrift://x:9083")
    with pytest.raises(ConfigError, match="not 'glue'"):
        pyiceberg_properties("glue", "x")


def test_s3a_warehouse_gets_pyiceberg_s3_settings() -> None:
    warehouse = ObjectStoreUri("s3a://landing/prefix").with_storage({
        "AWS_ENDPOINT_URL": "http://landing.127.0.0.1:9000", "AWS_ALLOW_HTTP": "true",
        "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "true", "AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "AKIA1",
        "AWS_SECRET_ACCESS_KEY": "sk-secret", "max_retries": "2"})
    found = pyiceberg_properties("jdbc", "jdbc:sqlite:/s/c.db", warehouse=warehouse)
    assert {k: v for k, v in found.items() if k.startswith(("s3.", "warehouse"))} == {
        "warehouse": "s3a://landing/prefix", "s3.endpoint": "http://127.0.0.1:9000",
        "s3.force-virtual-addressing": "true", "s3.region": "us-east-1", "s3.access-key-id": "AKIA1",
        "s3.secret-access-key": "sk-secret", "s3.connect-timeout": "15", "s3.request-timeout": "60"}
    path_style = ObjectStoreUri("s3a://landing").with_storage({
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false"})
    found = pyiceberg_properties("jdbc", "jdbc:sqlite:/s/c.db", warehouse=path_style)
    assert (found["s3.endpoint"], found["s3.force-virtual-addressing"]) == ("http://127.0.0.1:9000", "false")
    assert found["s3.region"] == "us-east-1"  # S3A's signing region without one: never asked of AWS


def test_the_properties_never_show_a_secret() -> None:
    sql = pyiceberg_properties("jdbc", "jdbc:postgresql://h:5432/db", "bridge", "pg-Secret-1")
    rest = pyiceberg_properties("rest", "https://cat/ice", "client", "rest-Secret-2")
    s3 = pyiceberg_properties("jdbc", "jdbc:sqlite:/s/c.db", warehouse=ObjectStoreUri("s3a://b").with_storage(
        {"AWS_SECRET_ACCESS_KEY": "s3-Secret-3"}))
    for properties, secret in ((sql, "pg-Secret-1"), (rest, "rest-Secret-2"), (s3, "s3-Secret-3")):
        assert secret not in repr(properties) and secret not in str(properties) and secret not in f"{properties}"
        with pytest.raises(TypeError, match="not pickled"):
            pickle.dumps(properties)
    assert "bridge:***@h:5432/db" in repr(sql)
    assert iceberg_catalog.catalog_name(sql) == (
        "the Iceberg catalog mqbridge at postgresql+psycopg2://bridge:***@h:5432/db?connect_timeout=10")


@pytest.mark.parametrize(("uri", "shown"), [
    ("postgresql+psycopg2://u:pw@h:1/db?x=1", "postgresql+psycopg2://u:***@h:1/db?x=1"),
    ("postgresql+psycopg2://u@h/db", "postgresql+psycopg2://u@h/db"),
    ("jdbc:postgresql://h/db?user=u&password=pw&ssl=true", "jdbc:postgresql://h/db?user=u&password=***&ssl=true"),
    ("https://a:b@cat/ice", "https://a:***@cat/ice"),
    ("sqlite:////state/catalog.db", "sqlite:////state/catalog.db"),
    ("thrift://metastore:9083", "thrift://metastore:9083"),
])
def test_shown_uri(uri: str, shown: str) -> None:
    assert shown_uri(uri) == shown


def test_a_drivers_error_text_is_redacted() -> None:
    properties = pyiceberg_properties("jdbc", "jdbc:postgresql://h/db", "u", "p@ss")
    text = f"cannot connect with {properties['uri']}: password p@ss (quoted p%40ss) refused"
    redacted = iceberg_catalog._redacted(text, properties)
    assert "p@ss" not in redacted and "p%40ss" not in redacted
    assert "postgresql+psycopg2://u:***@h/db" in redacted


class _RestCatalog(http.server.BaseHTTPRequestHandler):
    """A REST catalog's two first answers (its config, its namespaces), to a client with the basic
    authentication of `USER`/`SECRET` only: 401 otherwise. Records each request's Authorization."""

    seen: list[str | None] = []

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.seen.append(self.headers.get("Authorization"))
        expected = "Basic " + base64.b64encode(b"bridge:rest-Secret-4").decode()
        if self.headers.get("Authorization") != expected:
            body, status = {"error": {"message": "Not authorized", "type": "NotAuthorizedException", "code": 401}}, 401
        elif self.path.startswith("/v1/config"):
            body, status = {"defaults": {}, "overrides": {}}, 200
        else:
            body, status = {"namespaces": [["mqbridge"]]}, 200
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def rest_catalog() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _RestCatalog)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _RestCatalog.seen = []
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


def test_rest_catalog_basic_authentication(rest_catalog: str) -> None:
    """The user and password reach a REST catalog as HTTP basic authentication, as Spark's catalog
    sends them (`rest.auth.type = basic`); a wrong password is a configuration error without it."""
    catalog = iceberg_catalog.open_catalog(pyiceberg_properties("rest", rest_catalog, "bridge", "rest-Secret-4"))
    assert catalog.list_namespaces() == [("mqbridge",)]
    assert set(_RestCatalog.seen) == {"Basic " + base64.b64encode(b"bridge:rest-Secret-4").decode()}
    with pytest.raises(ConfigError, match="refuses the credentials") as refused:
        iceberg_catalog.open_catalog(pyiceberg_properties("rest", rest_catalog, "bridge", "wrong-Secret-5"))
    assert "wrong-Secret-5" not in str(refused.value)


@pytest.mark.parametrize(("kind", "uri", "user", "password"), [
    ("rest", "http://127.0.0.1:{port}/ice", "u", "p-Secret-6"), ("hive", "thrift://127.0.0.1:{port}", None, None)])
def test_a_catalog_that_does_not_answer_is_an_outage(kind: str, uri: str, user: str | None,
                                                     password: str | None) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(iceberg_catalog.IcebergCatalogUnavailableError, match=f"127.0.0.1:{port}") as down:
        iceberg_catalog.open_catalog(pyiceberg_properties(kind, uri.format(port=port), user, password))
    assert isinstance(down.value, SinkOutageError) and "p-Secret-6" not in str(down.value)


def test_the_properties_of_a_loaded_configuration(tmp_path: Path) -> None:
    """The embedded SQLite catalog under the warehouse, as the bridge's Spark driver gets it."""
    section = IcebergSection()
    catalog = IcebergCatalog(section, tmp_path / "state", tmp_path / "landing")
    assert dict(iceberg_catalog.catalog_properties(catalog)) == {
        "type": "sql", "uri": f"sqlite:///{tmp_path}/landing/_iceberg/catalog.db", "init_catalog_tables": "false",
        "warehouse": (tmp_path / "landing").as_uri()}
    section = IcebergSection(uri="jdbc:postgresql://127.0.0.1:5432/ice", user="u", password=SecretStr("pw-7"))
    found = iceberg_catalog.catalog_properties(IcebergCatalog(section, tmp_path, tmp_path))
    assert found["uri"] == "postgresql+psycopg2://u:pw-7@127.0.0.1:5432/ice?connect_timeout=10"
