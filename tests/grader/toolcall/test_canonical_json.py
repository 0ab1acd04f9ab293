"""canonical_json_parsed writes canonical_json's text (UTF-8) for any value read from JSON.

The task set's digest is computed over every task's canonical text; the loader writes a parsed
task with orjson where that text is the canonical one (canonical_json_parsed). Any difference
would change the digest every row carries, so the two are compared here on every kind of
value JSON text can hold, doubles of every magnitude and spelling above all.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import enum
import json
import math
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from grader.json import MAX_DEPTH, loads_exact
from grader.loader import load_tasks
from grader.tasks import build_task_set, tasks_digest
from grader.toolcall.canon import (
    TooDeepError,
    _canonical_at,
    canonical_json,
    canonical_json_parsed,
)

TEXT = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF))
DOUBLES = st.floats(allow_nan=False, allow_infinity=False)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**25), max_value=10**25)
    | DOUBLES
    | st.sampled_from([5.0, -0.0, 1e16, 1e-5, 1e-7, 0.0001, 1.5e300, 2.5e-300, 1e15 + 0.5])
    | TEXT
)
VALUES = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(TEXT, children, max_size=4),
    max_leaves=16,
)


@given(VALUES, st.integers(min_value=0, max_value=2))
def test_parsed_values_are_written_as_canonical_json_writes_them(value: Any, depth: int) -> None:
    assert canonical_json_parsed(value, depth) == canonical_json(value).encode()


# Integral doubles beside strings that look like them (".0,", "5.0]", escaped quotes): the
# text is rewritten in one scan that must skip every string whole.
LOOKALIKE_TEXT = st.lists(
    st.sampled_from(["5.0,", "-0.0]", "1.0}", '"', "\\", '\\"', "x", ".0"]), max_size=4
).map("".join)
INTEGRAL = st.sampled_from([5.0, -0.0, 0.0, 10.0, -7.0, 2.5, 123456789012345.0]) | st.integers(
    -9, 9
)
LOOKALIKES = st.recursive(
    INTEGRAL | LOOKALIKE_TEXT,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(LOOKALIKE_TEXT, children, max_size=4)
    ),
    max_leaves=12,
)


@given(LOOKALIKES, st.integers(min_value=0, max_value=2))
def test_integral_doubles_are_rewritten_outside_strings_only(value: Any, depth: int) -> None:
    assert canonical_json_parsed(value, depth) == canonical_json(value).encode()


@given(st.lists(DOUBLES, min_size=1, max_size=8))
def test_every_double_is_spelled_as_repr_or_as_its_integer(values: list[float]) -> None:
    text = canonical_json_parsed(values)
    assert text == canonical_json(values).encode()
    for written, value in zip(json.loads(text), values, strict=True):
        assert written == value
        if value.is_integer():
            assert isinstance(written, int) or math.isinf(written)


@pytest.mark.parametrize(
    ("levels", "deep"),
    [
        pytest.param(MAX_DEPTH - 1, False, id="within_the_bound"),
        pytest.param(MAX_DEPTH, False, id="at_the_bound"),
        pytest.param(MAX_DEPTH + 1, True, id="past_the_bound"),
    ],
)
def test_the_depth_bound_is_canonical_jsons(levels: int, deep: bool) -> None:
    value: Any = 1
    for _ in range(levels):
        value = [value]
    if deep:
        with pytest.raises(TooDeepError):
            canonical_json(value)
        with pytest.raises(TooDeepError):
            canonical_json_parsed(value)
    else:
        assert canonical_json_parsed(value) == canonical_json(value).encode()


@pytest.mark.parametrize(
    "line",
    [
        pytest.param('{"x": 12345678901234567890123}', id="wider_than_64_bits"),
        pytest.param('{"x": 1e400}', id="an_overflowing_literal"),
        pytest.param('{"x": "\\udcff"}', id="a_lone_surrogate"),
        pytest.param('{"b": [1.0, 2.5, -0.0], "a": {"z": 1e-7, "y": 3e20}}', id="doubles"),
        pytest.param('{"é": 1, "e": 2, "\\u0000": "\\u001f"}', id="keys_and_escapes"),
    ],
)
def test_values_orjson_cannot_write_take_the_walk(line: str) -> None:
    value = loads_exact(line)
    assert canonical_json_parsed(value) == canonical_json(value).encode()


def test_a_loaded_task_set_has_the_digest_of_its_tasks(tmp_path: Path) -> None:
    tasks = [
        {"id": "b", "expected": {"name": "f", "arguments": {"x": 1.0, "y": 0.00001}}},
        {"id": "a", "expected": {"name": "g", "arguments": {"s": "caf\u00e9"}}},
        {"id": "c", "expected": {"name": "h", "arguments": {"n": 10**30}}},
    ]
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps(t) + "\n" for t in tasks))
    loaded = load_tasks(path)
    assert loaded.digest == build_task_set(list(loaded)).digest
    assert loaded.digest == tasks_digest(tasks)


class Colour(enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


class Name(str):
    pass


@dataclasses.dataclass
class Point:
    x: int


def _outcome(write: Any, value: Any) -> Any:
    try:
        return write(value)
    except (TypeError, TooDeepError) as exc:
        return type(exc)


@pytest.mark.parametrize(
    "value",
    [
        pytest.param({"a": (1, 2)}, id="a_tuple"),
        pytest.param([uuid.UUID(int=5)], id="a_uuid"),
        pytest.param({"c": Colour.RED}, id="an_enum"),
        pytest.param({"l": Level.HIGH}, id="an_int_enum"),
        pytest.param({"n": Name("x")}, id="a_str_subclass"),
        pytest.param([Point(1)], id="a_dataclass"),
        pytest.param([datetime.date(2026, 1, 1)], id="a_date"),
        pytest.param([math.nan], id="nan"),
        pytest.param({"x": [math.inf]}, id="infinity"),
        pytest.param({1: "a"}, id="a_non_string_key"),
        pytest.param(collections.OrderedDict(b=1, a=2), id="a_dict_subclass"),
        pytest.param({"x": 2**70}, id="wider_than_64_bits"),
    ],
)
def test_values_that_are_not_plain_json_are_written_by_the_walk(value: Any) -> None:
    """canonical_json gives what its walk gives (a text or the same error) for anything orjson
    writes but JSON text could not hold, since digests of such values must not change."""
    assert _outcome(canonical_json, value) == _outcome(lambda v: _canonical_at(v, 0), value)


@given(VALUES)
def test_canonical_json_is_its_walk(value: Any) -> None:
    assert canonical_json(value) == _canonical_at(value, 0)
