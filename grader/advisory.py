"""Advisory checks: shown in rows and reports, left out of the verdict and every pass rate.

Seed 002 §7: a judge that cannot reach the agreed TPR/TNR bar "ships advisory-only: its verdicts
surface in review tooling for a human to consider, but do not gate a checkpoint promotion and
are not counted into a reported pass rate". A check is advisory when its definition says
``"advisory": true``, or when it cites a calibration record (``"calibration": "cal.json"``,
written by ``gradeproxy calibrate --out``, resolved beside the task file) that says
``advisory_only``. A check citing a record must pin the judge model the record was measured
with: another model is refused at load (seed 002 §6: a judge-model change voids the
calibration).

An advisory column keeps its verdict in the row (``"advisory": true``), but the engine leaves it
out of ``pass_rule``, ``result``/``passed``, the report's pass rates and therefore the gate. A
``pass_rule`` naming an advisory check, or a task whose every check is advisory, is refused:
nothing would be left to decide the row.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import field
from pathlib import Path
from typing import Any

from grader.checks import check_digest
from grader.errors import GraderError
from grader.json import JSONError, loads_exact
from grader.lazy_pattern import LazyPattern
from grader.values import value_type

ADVISORY_KEYS = ("advisory", "calibration")
CALIBRATION_KIND = "judge_calibration"


class AdvisoryError(GraderError, ValueError):
    """An ``advisory``/``calibration`` field is unusable; the message says which and why."""


_FILE_SOURCE = LazyPattern(r"(.+):[0-9]+")


def _base_dir(source: str) -> Path | None:
    """The directory of the task file named by ``source`` (``path:line``), else None.

    Only a task loaded from a file may cite a record: a task sent inline (the scoring API, MCP)
    must never make the server open a path of the caller's choosing.
    """
    match = _FILE_SOURCE().fullmatch(source)
    if match is None or not Path(match.group(1)).is_file():
        return None
    return Path(match.group(1)).parent


def load_record(path: Path) -> dict[str, Any]:
    """Read a calibration record written by ``gradeproxy calibrate --out``."""
    try:
        record = loads_exact(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, JSONError) as exc:
        raise AdvisoryError(f"calibration record {str(path)!r} cannot be read: {exc}") from None
    if not isinstance(record, dict) or record.get("kind") != CALIBRATION_KIND:
        raise AdvisoryError(f"{str(path)!r} is not a calibration record (kind {CALIBRATION_KIND})")
    if not isinstance(record.get("judge_model"), str):
        raise AdvisoryError(f"calibration record {str(path)!r} names no judge_model")
    return record


def _cited(definition: Mapping[str, Any], label: str, base: Path | None) -> dict[str, Any]:
    """The calibration record a check cites, checked against the model the check pins."""
    if base is None:
        raise AdvisoryError(
            f"{label}: 'calibration' is read only for tasks loaded from a task file; an inline "
            "task marks a check advisory with 'advisory': true"
        )
    cited = definition["calibration"]
    if not isinstance(cited, str) or not cited:
        raise AdvisoryError(f"{label}: 'calibration' must be the path of a calibration record")
    path = base / cited  # an absolute path stays absolute
    record = load_record(path)
    model = definition.get("model")
    if not isinstance(model, str):
        raise AdvisoryError(
            f"{label}: a check citing a calibration must pin 'model' (the record was measured "
            f"with {record['judge_model']!r})"
        )
    if model != record["judge_model"]:
        raise AdvisoryError(
            f"{label}: pins judge {model!r} but cites a calibration of {record['judge_model']!r}: "
            "a judge-model change voids the calibration; recalibrate (seed 002 §6)"
        )
    return record


@value_type
class Advice:
    """What :func:`split_advisory` found: the task to build, advisory names, digest overrides."""

    task: dict[str, Any]
    names: frozenset[str] = frozenset()
    # check index -> digest of the whole definition plus the cited record: a column's digest
    # changes when the record it follows changes (seed 003: the digest names the configuration).
    digests: Mapping[int, str] = field(default_factory=dict)


def _not_advisory(definition: Any) -> bool:
    """Whether a check definition has neither field (or is no object: the builder refuses it).
    A dict is told apart by its type first: an ABC's isinstance runs Python code."""
    if type(definition) is not dict and not isinstance(definition, Mapping):
        return True
    return definition.keys().isdisjoint(ADVISORY_KEYS)


def split_advisory(task: Mapping[str, Any], source: str) -> Advice | None:
    """The task with ``advisory``/``calibration`` taken off its checks, and what they said;
    None when no check has either field (nearly every task: the task is built as it is)."""
    checks = task.get("checks")
    if not isinstance(checks, list):
        return None
    for definition in checks:
        if not _not_advisory(definition):
            break
    else:
        return None
    names: set[str] = set()
    digests: dict[int, str] = {}
    stripped: list[Any] = []
    for index, definition in enumerate(checks):
        if _not_advisory(definition):
            stripped.append(definition)
            continue
        label = f"checks[{index}]: check {definition.get('name')!r}"
        flag = definition.get("advisory", False)
        if not isinstance(flag, bool):
            raise AdvisoryError(f"{label}: 'advisory' must be true or false")
        # The file is looked up only for a check citing a record (a stat per task otherwise).
        base = _base_dir(source) if "calibration" in definition else None
        record = _cited(definition, label, base) if "calibration" in definition else None
        if record is not None:
            flag = flag or record.get("advisory_only") is True
        if flag and isinstance(definition.get("name"), str):
            names.add(definition["name"])
        with contextlib.suppress(TypeError, ValueError):  # the builder names a non-JSON field
            digests[index] = check_digest({**definition, "calibration_record": record})
        stripped.append({k: v for k, v in definition.items() if k not in ADVISORY_KEYS})
    if names and len(names) == len(checks):
        raise AdvisoryError("every check is advisory: nothing is left to decide the result")
    rule = task.get("pass_rule", "all")
    if isinstance(rule, str) and is_advisory(rule, frozenset(names)):
        raise AdvisoryError(f"'pass_rule' {rule!r} names an advisory check")
    return Advice({**task, "checks": stripped}, frozenset(names), digests)


def is_advisory(column: str, names: frozenset[str]) -> bool:
    """A column of an advisory check (a policy check's ``name.behaviour`` too)."""
    return any(column == name or column.startswith(name + ".") for name in names)
