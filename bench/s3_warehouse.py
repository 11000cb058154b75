"""`bench/throughput.py --mode steady --s3`: the bridge's warehouse on the project's S3-compatible server
(`scripts/s3.sh`, S3Proxy on 127.0.0.1:9000, started here when nothing answers), in a bucket of its own;
the secret key reaches the bridge only through `${FILE:…}`, as an operator's would."""

from __future__ import annotations

import socket
import subprocess
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENDPOINT = "http://127.0.0.1:9000"
CREDENTIALS = ROOT / ".s3proxy" / "credentials"


def _credentials() -> tuple[str, str]:
    values = dict(line.split("=", 1) for line in CREDENTIALS.read_text().splitlines() if "=" in line)
    return values["access_key"], values["secret_key"]


def s3_warehouse(workdir: Path) -> tuple[str, dict[str, str]]:
    """(warehouse URI, `[spark.conf]` settings) of a new bucket on the project's S3 server."""
    with socket.socket() as probe:
        running = probe.connect_ex(("127.0.0.1", 9000)) == 0
    if not running:
        subprocess.run([str(ROOT / "scripts" / "s3.sh"), "start"], cwd=ROOT, check=True)
    access, secret = _credentials()
    from pyarrow import fs

    bucket = f"bench-{uuid.uuid4().hex[:12]}"
    fs.S3FileSystem(access_key=access, secret_key=secret, endpoint_override=ENDPOINT, scheme="http",
                    region="us-east-1", allow_bucket_creation=True).create_dir(bucket)
    secret_file = workdir / "s3-secret"
    secret_file.write_text(secret)
    secret_file.chmod(0o600)
    return f"s3a://{bucket}/landing", {
        "spark.hadoop.fs.s3a.endpoint": ENDPOINT,
        "spark.hadoop.fs.s3a.endpoint.region": "us-east-1",
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
        "spark.hadoop.fs.s3a.access.key": access,
        "spark.hadoop.fs.s3a.secret.key": f"${{FILE:{secret_file}}}",
    }
