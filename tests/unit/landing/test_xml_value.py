"""XML text beside attributes: Spark's `from_xml` puts the text of an element that also has attributes
into the column named by `valueTag` (`[types.X] value_tag`, `_VALUE` by default), at the root and in a
nested element. A real local Spark parses the bodies as the executor does (`BodyFormat.parse`)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from mqbridge.config import TypeConfig
from mqbridge.errors import ConfigError
from mqbridge.landing.formats import body_format


def parsed(spark: Any, config: TypeConfig, *bodies: bytes) -> list[dict[str, Any]]:
    """The typed columns of `bodies`, one dict per body; none may be a corrupt record."""
    fmt = body_format("orders", config)
    assert fmt is not None
    df = spark.createDataFrame(list(enumerate(bodies)), "_row INT, body BINARY")
    frame, observation = fmt.parse(df)
    rows = [r.asDict(recursive=True) for r in frame.orderBy("_row").select(*fmt.columns()).collect()]
    assert fmt.corrupt_rows(observation) == {}
    return rows


def test_an_elements_text_beside_its_attributes_lands_in_value(spark: Any) -> None:
    # Given a type whose schema has _VALUE at the root and in a nested element with an attribute
    config = TypeConfig(format="xml", schema="_id INT, _VALUE STRING, "
                                             "total STRUCT<_currency: STRING, _VALUE: DECIMAL(12,2)>")
    # When bodies whose elements hold text beside attributes are parsed
    rows = parsed(spark, config, b'<order id="7">rush<total currency="EUR">12.50</total></order>',
                  b'<order id="8"><total currency="USD">3</total></order>')
    # Then each element's text is in its _VALUE column (null where there is none)
    assert rows == [{"_id": 7, "_VALUE": "rush", "total": {"_currency": "EUR", "_VALUE": Decimal("12.50")}},
                    {"_id": 8, "_VALUE": None, "total": {"_currency": "USD", "_VALUE": Decimal("3.00")}}]


def test_value_tag_names_the_text_column(spark: Any) -> None:
    # Given value_tag = "amount" (and the default attribute prefix)
    config = TypeConfig(format="xml", value_tag="amount", schema="_currency STRING, amount DECIMAL(12,2)")
    # Then the root's text lands in `amount`, not in a _VALUE column
    assert parsed(spark, config, b'<total currency="EUR">12.50</total>') == [
        {"_currency": "EUR", "amount": Decimal("12.50")}]


def test_a_value_tag_equal_to_the_attribute_prefix_is_refused_at_load() -> None:
    with pytest.raises((ConfigError, ValueError), match="value_tag: must differ from attribute_prefix '_'"):
        TypeConfig(format="xml", value_tag="_", schema="a INT")
