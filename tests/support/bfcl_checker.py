"""BFCL's own checker, loaded pinned and alone: the oracle of the conformance tests and the anchor
process of bench/bfcl_checker_process.py.

Apart from :mod:`tests.support.bfcl` (the corpus, mutations and our side) because it imports
nothing of gradeproxy: the anchor process that times BFCL's checker must not pay for importing
our grader. bfcl-eval is pinned to exactly :data:`BFCL_VERSION`: its data, possible answers and
checker change between releases, and the module we stub is private. It is installed with
``--no-deps`` (plus ``filelock``): the checker needs nothing else, but
``bfcl_eval.constants.model_config`` imports some sixty model SDKs to give the checker one flag
(``underscore_to_dot``). That module is replaced in ``sys.modules`` here (:func:`load_bfcl`),
never edited on disk.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

BFCL_VERSION = "2026.3.23"
MODEL = "gradeproxy-stub"


class BfclMissingError(RuntimeError):
    """bfcl-eval is not installed at the pinned version."""


def load_bfcl() -> tuple[Callable[..., dict[str, Any]], Any, Callable[[Any], bool], Path]:
    """BFCL's ``ast_checker``, ``Language``, ``is_empty_output`` and data folder, stub in place."""
    try:
        version = importlib.metadata.version("bfcl-eval")
    except importlib.metadata.PackageNotFoundError:
        raise BfclMissingError("bfcl-eval is not installed (scripts/install-bfcl.sh)") from None
    if version != BFCL_VERSION:
        raise BfclMissingError(
            f"bfcl-eval {version} is installed; the harness is pinned to {BFCL_VERSION}"
        )
    name = "bfcl_eval.constants.model_config"
    if name not in sys.modules:
        stub = types.ModuleType(name)
        config = types.SimpleNamespace(underscore_to_dot=True, is_fc_model=True)

        class _Every(dict[str, Any]):
            def __missing__(self, key: str) -> Any:
                return config

        stub.MODEL_CONFIG_MAPPING = _Every()  # type: ignore[attr-defined]
        sys.modules[name] = stub
    checker = importlib.import_module("bfcl_eval.eval_checker.ast_eval.ast_checker")
    enums = importlib.import_module("bfcl_eval.constants.enums")
    package = importlib.import_module("bfcl_eval")
    data = Path(str(package.__file__)).parent / "data"
    return checker.ast_checker, enums.Language, _is_empty_output, data


def _is_empty_output(decoded: Any) -> bool:
    """``bfcl_eval.utils.is_empty_output`` (utils imports half of BFCL, so it is restated)."""
    if not isinstance(decoded, list):
        return True
    for item in decoded:
        if not isinstance(item, dict) or len(item) != 1:
            return True
    return len(decoded) == 0 or (len(decoded) == 1 and len(decoded[0]) == 0)
