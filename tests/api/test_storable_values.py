"""What the database can store (sas_project.validation.unstorable), answered by the C encoder
for most values and by a walk where it cannot say: both answer alike at every edge (a NUL in a
key or a value, its escape spelled as text, unpaired surrogates beside paired ones, numbers that
are not finite, brackets and quotes inside strings, nesting at and past MAX_JSON_DEPTH)."""

from __future__ import annotations

from typing import Any

import pytest

from sas_project.validation import MAX_JSON_DEPTH, unstorable

pytestmark = pytest.mark.sqlite


def nested(levels: int, *, inner: Any = 1) -> Any:
    value: Any = inner
    for n in range(levels):
        value = [value] if n % 2 else {"k": value}
    return value


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ({"a": "plain", "b": [1, 2.5, None, True]}, None),
        ({"text": "\\u0000 spelled, not a NUL"}, None),
        ({"quotes": 'say "[{" and \\" ]]]}}}'}, None),
        ({"emoji": "\U0001f600 paired"}, None),
        ((1, 2, ["tuple"]), None),
        ({"a": "x\x00y"}, "a NUL character at $.a"),
        ({"x\x00": 1}, "a NUL character in a key at $"),
        ({"a": ["\ud800"]}, "an unpaired surrogate at $.a[0]"),
        ({"n": float("nan")}, "a number that is not finite (nan) at $.n"),
        ({"n": [float("inf")]}, "a number that is not finite (inf) at $.n[0]"),
        (nested(MAX_JSON_DEPTH), None),
        (nested(MAX_JSON_DEPTH, inner="[[[[{{{{"), None),
        (nested(MAX_JSON_DEPTH + 1), f"nesting deeper than {MAX_JSON_DEPTH} levels"),
    ],
)
def test_unstorable_names_what_keeps_a_value_out_and_where(value: Any, problem: str | None) -> None:
    found = unstorable(value)
    if problem is None:
        assert found is None
    else:
        assert found is not None and found.startswith(problem), found


def test_a_large_storable_document_is_answered_without_a_walk(monkeypatch: pytest.MonkeyPatch) -> None:
    def walk(value: Any) -> bool:
        raise AssertionError("walked")

    monkeypatch.setattr("sas_project.validation._storable_walk", walk)
    assert (
        unstorable({"items": [{"sku": f"S{i}", "n": i, "q": [i, {"x": "]"}]} for i in range(4000)]}) is None
    )
