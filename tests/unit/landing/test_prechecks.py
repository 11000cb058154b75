"""The Python checks of typed bodies before Spark parses them (`mqbridge.landing.prechecks`)."""

from __future__ import annotations

from mqbridge.landing.prechecks import csv_precheck, fixed_precheck, json_precheck, xml_precheck

COLUMNS = ["sku", "qty", "amount"]


def test_json_takes_only_a_strict_utf8_object() -> None:
    assert json_precheck(b'{"a": 1}') is None
    assert "not an object" in (json_precheck(b"[1]") or "")
    assert "Expecting property name" in (json_precheck(b"{'a': 1}") or "")


def test_xml_takes_one_well_formed_document_and_names_where_it_breaks() -> None:
    assert xml_precheck(b'<?xml version="1.0"?>\n<o a="1"><b>x</b></o>') is None
    assert xml_precheck(b"<o><b>x</o>") == "body is not valid XML for schema: mismatched tag: line 1, column 9"
    assert "junk after document element" in (xml_precheck(b"<o/><o/>") or "")
    assert "no element found" in (xml_precheck(b"") or "")
    assert "not UTF-8" in (xml_precheck(b"<o>\xe9</o>") or "")
    # An entity that expands exponentially is refused by expat, not expanded
    entities = b"".join(b'<!ENTITY %s "%s">' % (bytes([98 + i]), (b"&" + bytes([97 + i]) + b";") * 10)
                        for i in range(8))
    lol = b'<!DOCTYPE l [<!ENTITY a "aaaaaaaaaa">' + entities + b"]><l>&i;</l>"
    assert xml_precheck(lol) is not None


def test_csv_takes_one_record_of_the_schemas_field_count() -> None:
    def check(body: bytes, header: bool = False, delimiter: str = ",") -> str | None:
        return csv_precheck(body, delimiter=delimiter, quote='"', columns=COLUMNS, header=header)

    assert check(b'A,1,"2,5"\r\n') is None
    assert check(b'"say ""hi""",1,2') is None
    assert check(b"A,1") == "body is not a valid CSV record for schema: 2 fields, the schema has 3 columns"
    assert check(b"A,1,2\nB,1,2") == "body is not a valid CSV record for schema: 2 records, one record per body"
    assert "0 records" in (check(b"") or "")
    assert check(b'A,"1,2') is not None  # an unclosed quote
    assert check(b" SKU |Qty|amount\nA|1|2", header=True, delimiter="|") is None
    assert check(b"sku|amount|qty\nA|1|2", header=True, delimiter="|") == (
        "body is not a valid CSV record for schema: the header line 'sku|amount|qty' does not name the schema's "
        "columns (sku|qty|amount)")


def test_fixed_takes_one_record_of_the_widths_total() -> None:
    assert fixed_precheck(b"ab  12", [4, 2]) is None
    assert fixed_precheck(b"ab  12\r\n", [4, 2]) is None
    assert fixed_precheck("äb  12".encode(), [4, 2]) is None  # characters, not bytes
    assert fixed_precheck(b"ab 12", [4, 2]) == \
        "body is not a valid fixed-width record for schema: 5 characters, the widths add up to 6"
    assert "line break inside the record" in (fixed_precheck(b"ab  12\nab  12", [4, 2]) or "")
