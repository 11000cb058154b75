"""The distribution: one import root, `mqbridge`, over the product owner's folders."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_wheel_has_exactly_one_top_level_import_name(tmp_path: Path) -> None:
    # Given the wheel `pip install .` would install
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
                   check=True, capture_output=True, timeout=300)
    [wheel] = tmp_path.glob("mqbridge-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    # Then its only package is mqbridge, with every folder mapped under it
    tops = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert tops == {"mqbridge"}
    for module in ("mqbridge/__init__.py", "mqbridge/py.typed", "mqbridge/listeners/stomp/__init__.py",
                   "mqbridge/config/schema.py", "mqbridge/service/notify.py",
                   "mqbridge/preprocessors/envelope.py", "mqbridge/plugins/host.py", "mqbridge/config/example.toml"):
        assert module in names, module
    # and every folder that holds an __init__.py is a package of the wheel (pyproject.toml lists them by
    # hand: a folder it misses installs nothing, and works only from a checkout)
    folders = {"bridge": "mqbridge", "listeners": "mqbridge/listeners", "preprocessors": "mqbridge/preprocessors",
               "config": "mqbridge/config", "service": "mqbridge/service"}
    packages = {folders[init.relative_to(ROOT).parts[0]] + "".join(f"/{part}" for part in init.relative_to(
                ROOT).parts[1:-1]) for folder in folders for init in (ROOT / folder).rglob("__init__.py")}
    in_wheel = {name.rsplit("/", 1)[0] for name in names if name.endswith("/__init__.py")}
    assert packages == in_wheel
    # and the extensions of core are declared as entry points, not imported by core
    [entry_points] = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "[mqbridge.commands]\nservice = mqbridge.service.cli:add_parser" in text
    assert "[mqbridge.observers]\nsystemd = mqbridge.service.notify:observer_from_environment" in text


def test_the_layout_table_of_the_developer_docs_names_every_core_subpackage() -> None:
    # docs/development.md "Layout" is where a newcomer learns what each folder is: a subpackage it
    # does not name is one the reader never hears of.
    table = (ROOT / "docs" / "development.md").read_text(encoding="utf-8")
    folders = sorted(p.parent.relative_to(ROOT).as_posix() for p in (ROOT / "bridge").rglob("__init__.py")
                     if p.parent != ROOT / "bridge")
    assert [f for f in folders if f"| `{f}/` |" not in table] == []
