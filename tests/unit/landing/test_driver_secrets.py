"""What the driver JVM is not given on its command line or in its environment (no JVM here: the
real one is in tests/integration/test_secrets_in_children.py)."""

from __future__ import annotations

import stat
from pathlib import Path

from mqbridge.config import parse_config
from mqbridge.landing.driver_secrets import DriverSecrets, child_environment, private_properties, properties_text
from mqbridge.landing.jvm import _ChildKwargs
from tests.support.configs import orders_config

S3_SECRET = "s3cr3t-of-the-object-store"
PASSCODE = "stomp-passcode-1234"
TOKEN = "monitoring-token-0123456789"


def _config() -> DriverSecrets:
    text = orders_config(
        f'[monitoring]\ntoken = "{TOKEN}"\n[spark.conf]\n"spark.hadoop.fs.s3a.secret.key" = "{S3_SECRET}"\n'
        '"spark.hadoop.fs.s3a.endpoint" = "${ENV:S3_ENDPOINT}"\n"spark.sql.shuffle.partitions" = "3"\n'
        '"spark.hadoop.fs.s3a.access.key" = "AKIA-not-secret-but-named-so"',
        source='host = "127.0.0.1"\nuser = "bridge"\npassword = "${ENV:STOMP_PASS}"')
    return DriverSecrets.of(parse_config(text, env={"S3_ENDPOINT": "http://minio:9000", "STOMP_PASS": PASSCODE}))


def test_secret_conf_is_named_like_a_credential_or_read_from_a_reference() -> None:
    secrets = _config()
    public, secret = secrets.split({"spark.hadoop.fs.s3a.secret.key": S3_SECRET, "spark.sql.shuffle.partitions": "3",
                                    "spark.hadoop.fs.s3a.endpoint": "http://minio:9000",
                                    "spark.hadoop.fs.s3a.access.key": "AKIA-not-secret-but-named-so",
                                    "spark.jdbc.Password": "x", "spark.some.TOKEN": "y"})
    assert public == {"spark.sql.shuffle.partitions": "3"}
    assert set(secret) == {"spark.hadoop.fs.s3a.secret.key", "spark.hadoop.fs.s3a.endpoint",
                           "spark.hadoop.fs.s3a.access.key", "spark.jdbc.Password", "spark.some.TOKEN"}
    # Named like a credential: a secret even without the configuration saying so
    assert DriverSecrets().split({"spark.hadoop.fs.s3a.secret.key": "k", "a": "b"}) == (
        {"a": "b"}, {"spark.hadoop.fs.s3a.secret.key": "k"})


def test_the_child_environment_holds_none_of_the_bridges_secrets() -> None:
    secrets = _config()
    assert {PASSCODE, TOKEN, S3_SECRET} <= secrets.values
    environ = {"STOMP_PASS": PASSCODE, "DB_URL": f"postgresql://u:{PASSCODE}@db/x", "PGPASSWORD": "pg",
               "MON": TOKEN, "PATH": "/usr/bin", "JAVA_HOME": "/usr/lib/jvm/x", "SHORT": "ab"}
    assert child_environment(environ, secrets.values | {"ab-not"}) == {
        "PATH": "/usr/bin", "JAVA_HOME": "/usr/lib/jvm/x", "SHORT": "ab"}
    # pyspark sets Popen's env itself: whatever it sets goes through the same filter
    kwargs = _ChildKwargs(secrets.values, stderr=-1)
    kwargs["env"] = environ
    assert kwargs["env"] == {"PATH": "/usr/bin", "JAVA_HOME": "/usr/lib/jvm/x", "SHORT": "ab"}
    assert kwargs["stderr"] == -1 and dict(**kwargs)["env"] == kwargs["env"]


def test_the_properties_file_is_private_escaped_and_removed(tmp_path: Path) -> None:
    with private_properties({"spark.a.secret": "va=l:ue #1\\", "spark.b.password": " lead\nnext"}) as path:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        text = path.read_text()
    assert text == "spark.a.secret=va\\=l\\:ue \\#1\\\\\nspark.b.password=\\ lead\\nnext\n"
    assert not path.exists() and not path.parent.exists()
    assert properties_text({"key with space": "v"}) == "key\\ with\\ space=v\n"
