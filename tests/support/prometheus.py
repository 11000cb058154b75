"""A real Prometheus of a test (Debian's `prometheus`): scrapes given targets every second under the
job "mqbridge", evaluates given rule files every second, on a free port of 127.0.0.1."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.support.exactly_once import free_port

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ROOT / "contrib" / "prometheus" / "alerts.yml"
DASHBOARD = ROOT / "contrib" / "grafana" / "mqbridge.json"


def tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise RuntimeError(f"{name} is not installed: run scripts/test-tools.sh")
    return found


class Prometheus:
    def __init__(self, base: Path, port: int) -> None:
        self.base, self.port = base, port
        self.url = f"http://127.0.0.1:{port}"

    def api(self, path: str, **params: str) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}{query}", timeout=10) as response:
            doc = json.loads(response.read())
        assert doc["status"] == "success", doc
        return doc["data"]

    def query(self, expr: str) -> list[Any]:
        return list(self.api("query", query=expr)["result"])

    def targets(self, job: str) -> list[dict[str, Any]]:
        """The active targets of scrape job `job` (`health`: up, down or unknown; `lastError`)."""
        return [t for t in self.api("targets", state="active")["activeTargets"] if t["labels"].get("job") == job]


@contextmanager
def prometheus(base: Path, targets: list[str], rule_files: list[Path], *,
               scrape: Mapping[str, Any] | None = None,
               other_jobs: Sequence[Mapping[str, Any]] = ()) -> Iterator[Prometheus]:
    """Started and ready; stopped at the end. `scrape` adds to the job's scrape configuration
    (`scheme`, `authorization`, `tls_config`...); `other_jobs` are further scrape configurations."""
    port = free_port()
    base.mkdir(parents=True, exist_ok=True)
    (base / "prometheus.yml").write_text(json.dumps({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(p) for p in rule_files],
        "scrape_configs": [{"job_name": "mqbridge", "static_configs": [{"targets": targets}], **(scrape or {})},
                           *other_jobs],
    }))  # JSON is YAML
    log = open(base / "prometheus.log", "wb")  # noqa: SIM115 -- closed below, after the process
    proc = subprocess.Popen([tool("prometheus"), f"--config.file={base / 'prometheus.yml'}",
                             f"--storage.tsdb.path={base / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=log, stderr=subprocess.STDOUT)
    server = Prometheus(base, port)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{server.url}/-/ready", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("Prometheus did not start:\n" + (base / "prometheus.log").read_text()[-3000:])
            time.sleep(0.2)
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
