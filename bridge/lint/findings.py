"""What `check-config` reports: one finding per problem, placed on the line of its key.

tomllib gives no positions, so `KeyLines` reads the TOML text once for the line each key is set on
(table headers, `[[array]]` entries counted, dotted and quoted keys). A finding whose key is not
written in the file (a default, or a whole table) falls back to the nearest key above it that is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from mqbridge.config import key_path
from mqbridge.errors import Loc

Severity = Literal["error", "warning"]
_HEADER = re.compile(r"\s*(\[\[?)\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
_ASSIGNMENT = re.compile(r"\s*((?:[A-Za-z0-9_-]+|\"[^\"]*\"|'[^']*')(?:\s*\.\s*(?:[A-Za-z0-9_-]+|\"[^\"]*\"|'[^']*'))*)"
                         r"\s*=")
_KEY_PART = re.compile(r"[A-Za-z0-9_-]+|\"((?:[^\"\\]|\\.)*)\"|'([^']*)'")


@dataclass(frozen=True)
class Finding:
    """One problem: where (`loc`, a key path), what is wrong, and what to write instead (`fix`,
    may be empty). An error is something `run` refuses; a warning is something it accepts but
    says at start (or that weakens a guarantee)."""

    loc: Loc
    problem: str
    fix: str = ""
    severity: Severity = "error"

    def line(self, file: str, lines: KeyLines) -> str:
        """`file:line: [warning: ]key: problem — fix`."""
        number = lines.find(self.loc)
        where = f"{file}:{number}" if number else file
        level = "warning: " if self.severity == "warning" else ""
        return f"{where}: {level}{self.text()}"

    def text(self) -> str:
        """`key: problem — fix`: the finding without its place in a file (what `run` logs)."""
        key = f"{key_path(self.loc)}: " if self.loc else ""
        return f"{key}{self.problem}{f' — {self.fix}' if self.fix else ''}"


class KeyLines:
    """The line number of every key and table header in a TOML text."""

    def __init__(self, text: str) -> None:
        self._lines: dict[Loc, int] = {}
        table: Loc = ()
        arrays: dict[Loc, int] = {}
        in_string: str | None = None
        for number, line in enumerate(text.splitlines(), start=1):
            if in_string is not None:  # inside a multi-line string: nothing here is a key
                if line.count(in_string) % 2:
                    in_string = None
                continue
            header = _HEADER.match(line)
            if header is not None:
                name = _parts(header[2])
                if header[1] == "[[":
                    arrays[name] = arrays.get(name, -1) + 1
                    table = (*name, arrays[name])
                else:
                    table = name
                self._lines.setdefault(table, number)
                continue
            assignment = _ASSIGNMENT.match(line)
            if assignment is not None:
                self._lines.setdefault((*table, *_parts(assignment[1])), number)
                rest = line[assignment.end():]
                for quotes in ('"""', "'''"):
                    if rest.count(quotes) % 2:
                        in_string = quotes

    def find(self, loc: Loc) -> int | None:
        """The line of `loc`, else of its nearest written parent; None if none is written."""
        for end in range(len(loc), 0, -1):
            number = self._lines.get(tuple(loc[:end]))
            if number is not None:
                return number
        return None


def _parts(dotted: str) -> Loc:
    """`a."b.c".d` as ("a", "b.c", "d")."""
    parts: list[str | int] = []
    for match in _KEY_PART.finditer(dotted):
        parts.append(match[1] if match[1] is not None else match[2] if match[2] is not None else match[0])
    return tuple(parts)
