"""The configuration reference is generated from the code and cannot go stale.

Every field of every config dataclass has a meaning in ``proxy/config/descriptions.py`` (the
schema editors read carries it), no meaning is left for a field that is gone, and
``docs/configuration.md`` is exactly what ``gradeproxy config-schema --markdown`` prints.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from typing import Any, get_args, get_type_hints

import pytest

from proxy.config import Config
from proxy.config.descriptions import FIELDS
from proxy.config.schema import config_markdown, config_schema
from tests.support.paths import REPO


def _config_classes(cls: type[Any], seen: dict[str, type[Any]]) -> dict[str, type[Any]]:
    seen[cls.__name__] = cls
    for hint in get_type_hints(cls).values():
        for candidate in (hint, *get_args(hint), *(a for h in get_args(hint) for a in get_args(h))):
            if dataclasses.is_dataclass(candidate) and isinstance(candidate, type):
                _config_classes(candidate, seen)
    return seen


CLASSES = _config_classes(Config, {})
FIELD_NAMES = [
    (name, item.name) for name, cls in CLASSES.items() for item in dataclasses.fields(cls)
]


@pytest.mark.parametrize(("cls", "field"), FIELD_NAMES, ids=[f"{c}.{f}" for c, f in FIELD_NAMES])
def test_every_config_field_has_a_meaning(cls: str, field: str) -> None:
    assert FIELDS.get(cls, {}).get(field, "").strip(), f"describe {cls}.{field} in descriptions.py"


def test_no_meaning_outlives_its_field() -> None:
    described = {(cls, field) for cls, fields in FIELDS.items() for field in fields}
    assert described - set(FIELD_NAMES) == set()


def test_the_schema_carries_the_meanings() -> None:
    listen = config_schema()["properties"]["listen"]["properties"]
    assert listen["port"]["description"] == FIELDS["Listen"]["port"]


def test_docs_configuration_is_what_the_command_prints() -> None:
    printed = subprocess.run(
        [sys.executable, "-m", "gradeproxy.cli", "config-schema", "--markdown"],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    ).stdout
    assert printed == config_markdown()
    on_disk = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert on_disk == printed, "run: gradeproxy config-schema --markdown > docs/configuration.md"
