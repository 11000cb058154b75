"""The cheap checks of a typed body in Python, before Spark parses it (`mqbridge.landing.formats`).

They catch what Spark's parsers would accept or report without a reason: JSON that Spark's lenient
parser takes (single quotes, trailing garbage, an empty body), XML that is not well formed (the
reason names the line and column), a CSV body that is not one record of the schema's field count
or whose header is not the schema's, a fixed-width record of the wrong length. Every typed body
must be UTF-8: Spark reads `body` cast to a string, which would silently replace invalid bytes
(a code page is decoded first, by the `decode` preprocessor or by IBM MQ's conversion).
Each check returns why the body cannot be parsed, or None.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from xml.etree import ElementTree

#: The start of every reason, by format: the backout queue's `mqbridge-reason` header begins with it.
INVALID = {
    "json": "body is not valid JSON for schema",
    "xml": "body is not valid XML for schema",
    "csv": "body is not a valid CSV record for schema",
    "fixed": "body is not a valid fixed-width record for schema",
}


def decoded(body: bytes, fmt: str) -> tuple[str | None, str | None]:
    """(the body as text, None), or (None, why it is not UTF-8)."""
    try:
        return body.decode("utf-8"), None
    except UnicodeDecodeError as exc:
        return None, f"{INVALID[fmt]}: not UTF-8 ({exc.reason} at byte {exc.start}); decode a code page first"


def without_line_end(text: str) -> str:
    """`text` without one final line break (\\n or \\r\\n): a record written as a line."""
    if text.endswith("\r\n"):
        return text[:-2]
    return text[:-1] if text.endswith("\n") else text


def json_precheck(body: bytes) -> str | None:
    """Why `body` cannot be a JSON object, or None if it is one."""
    text, why = decoded(body, "json")
    if text is None:
        return why
    try:
        value = json.loads(text)
    except ValueError as exc:
        return f"{INVALID['json']}: {exc}"
    except RecursionError:
        return f"{INVALID['json']}: nested too deeply"
    if not isinstance(value, dict):
        return f"{INVALID['json']}: top level is a JSON {type(value).__name__}, not an object"
    return None


def xml_precheck(body: bytes) -> str | None:
    """Why `body` is not one well-formed XML document, or None. (ElementTree resolves no external
    entity, and expat refuses exponential entity expansion.)"""
    text, why = decoded(body, "xml")
    if text is None:
        return why
    try:
        ElementTree.fromstring(text)
    except ElementTree.ParseError as exc:
        return f"{INVALID['xml']}: {exc}"
    except RecursionError:
        return f"{INVALID['xml']}: nested too deeply"
    return None


def csv_precheck(body: bytes, *, delimiter: str, quote: str, columns: Sequence[str], header: bool) -> str | None:
    """Why `body` is not one CSV record with a field per schema column (`columns`, their names), or
    None. With `header` the body's first line must name the columns, in order (compared without
    case or surrounding blanks)."""
    text, why = decoded(body, "csv")
    if text is None:
        return why
    text = without_line_end(text)
    if header:
        first, _, text = text.partition("\n")
        found = _records(first.removesuffix("\r"), delimiter, quote)
        names = [n.strip().lower() for n in found[0]] if isinstance(found, list) and found else []
        if names != [c.lower() for c in columns]:
            return (f"{INVALID['csv']}: the header line {first.strip()[:200]!r} does not name the schema's columns "
                    f"({delimiter.join(columns)})")
    records = _records(text, delimiter, quote)
    if isinstance(records, str):
        return f"{INVALID['csv']}: {records}"
    if len(records) != 1:
        return f"{INVALID['csv']}: {len(records)} records, one record per body"
    if len(records[0]) != len(columns):
        return f"{INVALID['csv']}: {len(records[0])} fields, the schema has {len(columns)} columns"
    return None


def _records(text: str, delimiter: str, quote: str) -> list[list[str]] | str:
    """The records of `text` (doubled quotes escape a quote, as Spark is told too), or why not."""
    try:
        return list(csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, quotechar=quote, strict=True))
    except csv.Error as exc:
        return str(exc)


def fixed_precheck(body: bytes, widths: Sequence[int]) -> str | None:
    """Why `body` is not one record of exactly `sum(widths)` characters (one final line break
    allowed), or None."""
    text, why = decoded(body, "fixed")
    if text is None:
        return why
    text = without_line_end(text)
    if "\n" in text or "\r" in text:
        return f"{INVALID['fixed']}: a line break inside the record, one record per body"
    if len(text) != sum(widths):
        return f"{INVALID['fixed']}: {len(text)} characters, the widths add up to {sum(widths)}"
    return None
