"""The layers of STYLE.md and ARCHITECTURE.md, checked over the source folders (which
pyproject.toml maps onto the one import root `mqbridge`, so path-based import linters see nothing).

Only imports that run count: those under `if TYPE_CHECKING:` are annotations (observers take the
narrow `mqbridge.observer.BridgeView`, so no module but the composition root names the `Bridge`).
"""

from __future__ import annotations

import ast
import functools
import graphlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Folder -> the package it is (pyproject.toml [tool.setuptools.package-dir]).
FOLDERS = {"bridge": "mqbridge", "listeners": "mqbridge.listeners", "preprocessors": "mqbridge.preprocessors",
           "config": "mqbridge.config", "service": "mqbridge.service"}
#: The message path by stage: a listener's unit of work, the shared bulks, the threads' supervision.
#: They hand bulks to executors they are given and know nothing of how they land.
STAGES = ("mqbridge.loop", "mqbridge.bulks", "mqbridge.supervision")
#: What the rest of core builds on besides the stages: the maintenance and landing side, and the table
#: formats both ask of a table (`mqbridge.table_formats`).
SINKS = ("mqbridge.landing", "mqbridge.maintenance", "mqbridge.monitoring", "mqbridge.table_formats")
#: Maintenance: a rewrite engine, and the policies that decide what it rewrites (siblings).
ENGINE = "mqbridge.maintenance.engine"
POLICIES = ("mqbridge.maintenance.purge", "mqbridge.maintenance.compaction")
#: The modules of `maintenance/` that ask both policies (`mqbridge compact`, `[compaction] interval`).
BOTH_POLICIES = ("mqbridge.maintenance.rounds", "mqbridge.maintenance.compaction_scheduler")
#: The modules at the top of `bridge/`: the vocabulary every stage speaks, the composition root and
#: the command line. A module that is none of these belongs in a package.
TOP = ("__init__", "__main__", "app", "cli", "counters", "drivers", "errors", "failpoints", "gate", "identity",
       "logsetup", "message", "observer", "put_time", "records", "source", "strict_modes")
#: Beside the stages, used by them and by the adapters: what leaves with a commit (results, derived
#: messages), where a message went (the record of moves, `mqbridge where`), and what an operator sends
#: to a queue again (re-drive, replay). They read what the stages expose and import none of them.
BESIDE = ("mqbridge.outbound", "mqbridge.tracing", "mqbridge.resend")
ADAPTERS = ("mqbridge.listeners", "mqbridge.preprocessors", "mqbridge.service")


def _module(folder: str, path: Path) -> str:
    parts = [FOLDERS[folder], *path.relative_to(ROOT / folder).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_imports(path: Path, *, annotations: bool = False, root: str = "mqbridge") -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    annotation_only = set() if annotations else {
        id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for n in ast.walk(node)}
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in annotation_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)  # `from mqbridge import failpoints`
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return {name for name in found if name == root or name.startswith(root + ".")}


@functools.cache
def _graph() -> dict[str, set[str]]:
    return {_module(folder, path): _runtime_imports(path)
            for folder in FOLDERS for path in sorted((ROOT / folder).rglob("*.py"))}


def _within(name: str, packages: tuple[str, ...] | str) -> bool:
    packages = (packages,) if isinstance(packages, str) else packages
    return any(name == p or name.startswith(p + ".") for p in packages)


def _violations(importers: tuple[str, ...] | str, forbidden: tuple[str, ...] | str) -> list[str]:
    return sorted(f"{module} imports {name}" for module, names in _graph().items() if _within(module, importers)
                  for name in names if _within(name, forbidden))


@pytest.mark.parametrize(("importers", "forbidden", "why"), [
    *((sink, STAGES, "landing, maintenance and monitoring are called by the message path, never the other way "
       "round") for sink in SINKS),
    (STAGES, SINKS, "the message path is handed executors and observers by the composition root (app)"),
    *((beside, STAGES, "the stages use these; what they need of a stage is handed to them (Bridge.holding)")
      for beside in BESIDE),
    ("mqbridge.loop", "mqbridge.supervision", "a unit of work knows nothing of who runs its thread"),
    ("mqbridge.bulks", ("mqbridge.loop", "mqbridge.supervision"), "the collector serves units, it does not drive them"),
    ("mqbridge.landing", ("mqbridge.maintenance", "mqbridge.monitoring"),
     "maintenance builds on landing, not the reverse"),
    ("mqbridge.monitoring", ("mqbridge.landing", "mqbridge.maintenance"), "monitoring knows counters, not sinks"),
    (ENGINE, (*POLICIES, *BOTH_POLICIES), "policies decide what; the engine rewrites whatever it is asked to"),
    (POLICIES[0], POLICIES[1:], "sibling policies over one engine: what both use is the engine's"),
    (POLICIES[1], POLICIES[:1], "sibling policies over one engine: what both use is the engine's"),
    ((ENGINE, *POLICIES), BOTH_POLICIES, "the rounds that ask both policies build on them, not the reverse"),
])
def test_a_layer_imports_nothing_above_it(importers: tuple[str, ...] | str, forbidden: tuple[str, ...] | str,
                                         why: str) -> None:
    assert _violations(importers, forbidden) == [], why


def test_core_imports_no_adapter() -> None:
    graph = _graph()
    core = tuple(m for m in graph if not _within(m, ADAPTERS) and not _within(m, "mqbridge.config"))
    offenders = sorted(f"{module} imports {name}" for module in core for name in graph[module]
                       if _within(name, ADAPTERS))
    assert offenders == [], "core finds adapters by the configuration's kind string and by entry points"


def test_the_configuration_imports_no_adapter() -> None:
    assert _violations("mqbridge.config", ADAPTERS) == [], "config/ validates; adapters read their typed sections"


def test_adapters_do_not_import_each_other() -> None:
    for adapter in ADAPTERS:
        others = tuple(a for a in ADAPTERS if a != adapter)
        assert _violations(adapter, others) == [], f"{adapter} depends on core only"


def test_no_import_cycles_not_even_through_annotations() -> None:
    # `from mqbridge.landing import rows` imports the module rows, not (only) the package's __init__
    imports = {_module(folder, path): _runtime_imports(path, annotations=True)
               for folder in FOLDERS for path in sorted((ROOT / folder).rglob("*.py"))}
    graph = {module: {name for name in names if name in imports and name != module
                      and not any(other.startswith(name + ".") and other in imports for other in names)}
             for module, names in imports.items()}
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as cycle:
        pytest.fail(f"import cycle: {' -> '.join(cycle.args[1])}")


def test_the_graph_sees_the_imports_it_checks() -> None:
    # A check that found no imports at all would pass every rule above
    graph = _graph()
    assert "mqbridge.landing.executor" in graph and "mqbridge.landing.session" in graph["mqbridge.landing.executor"]
    assert "mqbridge.failpoints" in graph["mqbridge.landing.landing"]
    assert _violations("mqbridge.app", STAGES), "the composition root imports the message path"
    assert _violations(BOTH_POLICIES, POLICIES[:1]) and _violations(BOTH_POLICIES, POLICIES[1:]), \
        "the rounds of `mqbridge compact` ask both policies"


def test_no_test_module_imports_another() -> None:
    # What tests share lives in tests/support/ (or a non-test module beside them): a test module imported
    # by another runs its module-level set-up twice and ties two suites' fixtures together.
    tests = ROOT / "tests"
    offenders = [f"{path.relative_to(ROOT)} imports {name}"
                 for path in sorted(tests.rglob("test_*.py"))
                 for name in sorted(_runtime_imports(path, annotations=True, root="tests"))
                 if name.rsplit(".", 1)[-1].startswith("test_")]
    assert offenders == []


def test_every_module_at_the_top_of_core_is_vocabulary() -> None:
    # The top of bridge/ holds what every stage speaks; a hub of the message path there hides the layout.
    top = sorted(p.stem for p in (ROOT / "bridge").glob("*.py"))
    assert [m for m in top if m not in TOP] == [], "move it into its stage's package, or list it in TOP if vocabulary"
