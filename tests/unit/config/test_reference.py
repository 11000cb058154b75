"""docs/configuration.md is what `python -m mqbridge.config.reference` writes from the models' fields."""

from __future__ import annotations

from pathlib import Path

from mqbridge.config.forwards import ForwardConfig
from mqbridge.config.reference import render
from mqbridge.config.schema import BridgeConfig, ListenerConfig, TypeConfig
from mqbridge.config.sources import MqSourceConfig, StompSourceConfig

DOC = Path(__file__).resolve().parents[3] / "docs" / "configuration.md"


def test_the_reference_in_docs_is_up_to_date() -> None:
    assert DOC.read_text() == render(), ("docs/configuration.md is out of date: run "
                                         "`python -m mqbridge.config.reference > docs/configuration.md`")


def test_every_key_of_every_table_is_in_the_reference_with_its_default() -> None:
    text = render()
    models = [TypeConfig, ListenerConfig, StompSourceConfig, MqSourceConfig, ForwardConfig,
              *(field.annotation for name, field in BridgeConfig.model_fields.items()
                if name not in ("types", "sources", "listeners", "forwards"))]
    for model in models:
        for name, field in model.model_fields.items():  # type: ignore[union-attr]
            assert f"| `{field.alias or name}` |" in text, f"{model.__name__}.{name}"  # type: ignore[union-attr]
    assert "| `bulk_size` | size | `5MB` |" in text and "| `dedupe_window` | duration | `7d` |" in text
    assert "| `source` | string | **required** |" in text and "| `max_rss` | size | — |" in text
