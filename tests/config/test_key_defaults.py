"""One meaning per default: the key table (`config/keys.py`, what `validate` and the docs show) and the Flow
model's field defaults (what a flow gets when the key is absent) must agree, or an operator reading the table is
told a default the code does not use."""

from __future__ import annotations

from typing import Any

import pytest

from mirrorflow.config.keys import KeySpec, flow_key_spec
from mirrorflow.config.model import TYPED_FIELDS, Flow
from mirrorflow.config.values import parse_bool, parse_double, parse_int
from mirrorflow.core.patterns import parse_list


def parsed_default(spec: KeySpec) -> Any:
    value = spec.default
    if value is None:
        return None
    if spec.type == "bool":
        return parse_bool(spec.name, value)
    if spec.type in ("int", "long", "short"):
        return parse_int(spec.name, value, spec.type)
    if spec.type == "double":
        return parse_double(spec.name, value)
    if spec.type == "list":
        return list(parse_list(value))
    return value


def comparable(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


@pytest.mark.parametrize(("field", "key"), sorted(TYPED_FIELDS.items()))
def test_the_key_table_and_the_model_give_the_same_default(field: str, key: str) -> None:
    spec = flow_key_spec(key)
    assert spec is not None, f"Flow.{field} is read from {key}, which the key table does not know"
    model = comparable(Flow.model_fields[field].default)
    table = parsed_default(spec)
    if spec.type == "enum" and isinstance(table, str) and isinstance(model, str):
        table, model = table.lower(), model.lower()
    assert table == model, f"{key}: the key table says {spec.default!r}, Flow.{field} defaults to {model!r}"
