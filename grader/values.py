"""``@value_type``: a dataclass mypy holds frozen and the interpreter builds at full speed.

A frozen dataclass pays for its immutability at run time: its ``__init__`` sets each field
through ``object.__setattr__``, several times the cost of a plain slotted dataclass on CPython
3.11 (docs/performance.md, "Figures behind the code"). The proxy builds a dozen such records for
every graded answer (the capture, the extraction, the verdict, the columns, the outcome, the
row's live fields), which made a fifth of grading a typical tool call. ``@value_type`` keeps the
guarantee where it is checked, in ``mypy --strict`` (PEP 681's ``frozen_default``: assigning to
a field is a type error), and builds a plain slotted dataclass. ``unsafe_hash`` keeps the hash a
frozen dataclass has, so a value can still be a dict key or a set member.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeVar, dataclass_transform

__all__ = ["value_type"]

_T = TypeVar("_T")


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
def value_type(cls: type[_T]) -> type[_T]:
    """A slotted dataclass with a frozen dataclass's equality and hash, frozen to mypy."""
    return dataclass(slots=True, unsafe_hash=True)(cls)
