"""One exception tree: every public exception ``grader`` defines derives from ``GraderError``,
keeps a builtin base its callers catch, and is drawn in ``grader/errors.py``'s docstring."""

from __future__ import annotations

import re

import pytest

import grader
import grader.errors
from grader.errors import GraderError
from tests.support.exceptions import defined_exceptions

EXCEPTIONS = defined_exceptions(grader, lambda name: False)


@pytest.mark.parametrize("name", sorted(EXCEPTIONS))
def test_every_grader_exception_derives_from_the_root(name: str) -> None:
    cls = EXCEPTIONS[name]
    assert issubclass(cls, GraderError)
    if cls is not GraderError:  # callers' `except ValueError` (or LookupError …) still works
        builtins = {b for b in cls.__mro__ if b.__module__ == "builtins"}
        assert builtins - {Exception, BaseException, object}


def test_the_drawn_tree_is_the_defined_tree() -> None:
    doc = grader.errors.__doc__ or ""
    drawn = set(re.findall(r"[├└]── (\w+)", doc)) | {"GraderError"}
    assert drawn == set(EXCEPTIONS)
