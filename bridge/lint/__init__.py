"""`mqbridge check-config`: everything `run` would refuse or warn about, found without contacting a
broker or starting Spark, one finding per line on the line of its key.

    report = lint_file("bridge.toml")      # ConfigError only when the file is unreadable or not TOML
    print("\\n".join(report.lines()))
    sys.exit(report.exit_code(strict=False))

The modules: `findings` (a finding, the line of a key), `environment` (directories, files,
drivers), `ddl` (Spark DDL without Spark), `evolution` (schema changes against the tables' files),
`advice` (the warnings `run` gives at start).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from mqbridge.config import BridgeConfig
from mqbridge.config.ddl import EXAMPLE, DdlError, ddl_columns
from mqbridge.config.formats import BODY_TEXT
from mqbridge.config.loader import check_text, read_text
from mqbridge.lint.advice import advice, broker_advice, start_warnings
from mqbridge.lint.environment import environment_findings
from mqbridge.lint.evolution import evolution_findings
from mqbridge.lint.findings import Finding, KeyLines

__all__ = ["Finding", "LintReport", "broker_advice", "lint_file", "lint_text", "start_warnings"]

_LISTENER = re.compile(r"listeners\[(\d+)\]")
_UNRESOLVED_FIX = "run check-config with the service's environment and files: `run` resolves it the same way"


@dataclass
class LintReport:
    """The findings of one configuration file, and the configuration when it validated."""

    file: str
    findings: list[Finding]
    key_lines: KeyLines
    config: BridgeConfig | None

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "warning"]

    def lines(self) -> list[str]:
        """One line per finding, `file:line: key: problem — what to write instead`, in file order."""
        ordered = sorted(self.findings, key=lambda f: self.key_lines.find(f.loc) or 0)
        return [finding.line(self.file, self.key_lines) for finding in ordered]

    def exit_code(self, *, strict: bool) -> int:
        """0: nothing `run` refuses (warnings allowed unless `strict`); 1: problems found."""
        return 1 if self.errors or (strict and self.warnings) else 0


def lint_file(path: str | os.PathLike[str]) -> LintReport:
    """Lint the configuration file at `path`. Raises ConfigError when it cannot be read or is
    not TOML (there is nothing to lint)."""
    return lint_text(read_text(path), str(path))


def lint_text(text: str, path: str = "<string>", env: Mapping[str, str] | None = None) -> LintReport:
    """Lint configuration TOML `text` (named `path`; see `mqbridge.config.parse_config`)."""
    checked = check_text(text, path, env, secrets=False)
    findings = [Finding(loc, message, _UNRESOLVED_FIX) for loc, message in checked.unresolved]
    findings += [Finding(loc, message) for loc, message in checked.problems]
    if checked.config is not None:
        findings += [*environment_findings(checked.config), *_schemas(checked.config),
                     *evolution_findings(checked.config),
                     *_plugins(checked.config), *advice(checked.config)]
    return LintReport(path, findings, KeyLines(text), checked.config)


def _schemas(config: BridgeConfig) -> Iterator[Finding]:
    """Each type's `schema` parsed as Spark DDL, and its columns against the landed ones."""
    from mqbridge.landing.rows import LANDED_COLUMNS  # pyarrow, no JVM

    for name, type_config in config.types.items():
        if type_config.schema_ddl is None:
            continue
        loc = ("types", name, "schema")
        try:
            columns = ddl_columns(type_config.schema_ddl)
        except DdlError as exc:
            yield Finding(loc, f"not a Spark DDL column list: {exc}", f'write e.g. "{EXAMPLE}"')
            continue
        # keep_body lands the body as text beside the parsed columns (`mqbridge.config.formats`)
        taken = {c.lower() for c in LANDED_COLUMNS} | ({BODY_TEXT} if type_config.keep_body else set())
        for column in columns:
            if column.lower() in taken:
                yield Finding(loc, f"column {column!r} clashes with a landed column or another schema column "
                              "(names are case-insensitive)", "rename it")
            taken.add(column.lower())


def _plugins(config: BridgeConfig) -> Iterator[Finding]:
    """The plugin folders loaded and every listener's chain built, as `run` does at start."""
    from mqbridge.plugins import PluginHost

    host = PluginHost.from_config(config)
    host.start(strict=False)
    host.close()
    for problem in host.chain_problems:
        match = _LISTENER.match(problem)
        loc = ("listeners", int(match[1]), "preprocessors") if match else ("listeners",)
        yield Finding(loc, problem.split(": ", 1)[1] if match and ": " in problem else problem)
    configured = {str(config.resolve_path(p)) for p in config.bridge.plugin_dirs or ()}
    for error in host.errors:
        if error.path in configured and not os.path.isdir(error.path):
            continue  # a missing configured folder is already an error of `environment`
        if error.unsafe:  # `run` refuses to start
            yield Finding(("bridge", "plugin_dirs"), error.message, "chmod go-w it, or chown it to this user")
        else:
            yield Finding(("bridge", "plugin_dirs"), f"plugin not loaded: {error}", severity="warning")
