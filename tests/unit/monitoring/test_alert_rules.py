"""The shipped alert rules (contrib/prometheus/alerts.yml) and their runbook: every alert links to
its own section of docs/operations.md, every section there belongs to an alert, and every alert
has a promtool unit test. promtool itself running the rules' tests is in
tests/integration/test_prometheus.py (and below, when promtool is installed)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
ALERTS = ROOT / "contrib" / "prometheus" / "alerts.yml"
RUNBOOK = ROOT / "docs" / "operations.md"


def alerts() -> dict[str, str]:
    """Each alert's rule text, by name (alerts.yml is flat: one `- alert:` item after another)."""
    parts = re.split(r"^\s*- alert: (\w+)\n", ALERTS.read_text(), flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def runbook_sections() -> list[str]:
    """The anchors of the runbook's alert sections (GitHub's: the heading in lower case)."""
    alerts_part = RUNBOOK.read_text().split("\n## Alerts\n", 1)[1]
    return [title.lower() for title in re.findall(r"^### (\w+)$", alerts_part, flags=re.M)]


def test_every_alert_links_its_own_section_of_the_runbook() -> None:
    rules = alerts()
    assert len(rules) >= 12 and {"MqbridgeListenerStuck", "MqbridgePluginFallback", "MqbridgePurgeFailed"} <= set(rules)
    links = {name: re.findall(r'runbook_url: "([^"]+)"', text) for name, text in rules.items()}
    assert {name: found for name, found in links.items() if found != [f"docs/operations.md#{name.lower()}"]} == {}
    assert sorted(runbook_sections()) == sorted(name.lower() for name in rules)  # no section without its alert


def test_every_alert_has_a_promtool_test_case() -> None:
    tested = set(re.findall(r"alertname: (\w+)", (ALERTS.parent / "alerts_test.yml").read_text()))
    assert sorted(set(alerts()) - tested) == []


def test_the_rules_pass_their_promtool_tests() -> None:
    promtool = shutil.which("promtool")  # never skipped: scripts/test.sh installs it (scripts/test-tools.sh)
    assert promtool is not None, "promtool is not installed: run scripts/test-tools.sh"
    result = subprocess.run([promtool, "test", "rules", "alerts_test.yml"], cwd=ALERTS.parent,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "SUCCESS" in result.stdout, result.stdout + result.stderr
