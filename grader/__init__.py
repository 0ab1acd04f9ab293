"""gradeproxy's grader: grading.md's tool-call grader and the checks, as a pure library.

No I/O in the grading path and no aiohttp: the proxy, the offline CLI and every other scoring
surface grade through one engine here (``grade``/``grade_async`` → ``Outcome``; rows from
``grader.rows``, reports from ``grader.report``; docs/checks-contract.md). The public API is
curated in ``__all__`` (a test keeps it complete), one name per concept; the exact-number JSON
reader is ``grader.json``. Every exception derives from ``GraderError`` (``grader/errors.py``).

Importing ``grader`` imports none of it: each public name's module is imported on first use
(PEP 562's module ``__getattr__``), so a command that needs the engine and the loader does not
pay for calibration, the episodes or every check kind at start-up.
"""

from __future__ import annotations

import importlib as _importlib
import typing as _typing

# Imported now, not on first use: ``grader.score`` is also a submodule, and importing the
# submodule anywhere would otherwise bind the module, not the function, to the name.
from grader.score import score

if _typing.TYPE_CHECKING:
    from grader.analysis.calibration import (
        Calibration,
        CalibrationError,
        bias_corrected_pass_rate,
        calibrate,
        tpr_tnr,
    )
    from grader.api import (
        GradedAnswer,
        RunResult,
        UnknownTaskError,
        grade_run,
        grade_run_async,
    )
    from grader.checks import (
        CHECK_REASON_CODES,
        Check,
        CheckContext,
        CheckDefinitionError,
        CheckReasonCode,
        CheckResult,
        Judge,
        JudgeClient,
        JudgeConfig,
        Sample,
        build_check,
        build_checks,
    )
    from grader.engine import (
        Outcome,
        grade,
        grade_async,
        offline_context,
    )
    from grader.errors import GraderError
    from grader.json import MAX_DEPTH
    from grader.loader import load_tasks, parse_task
    from grader.report import CheckTally, Report, Tally
    from grader.rows import (
        LIVE_FIELDS,
        OFFLINE_FIELDS,
        ROW_SCHEMA_VERSION,
        SAMPLE_FIELDS,
        answer_row,
        offline_row,
    )
    from grader.tasks import (
        TASK_KEYS,
        CheckDefinition,
        NoExpectedCallError,
        Task,
        TaskHasChecksError,
        TaskLoadError,
        TaskSet,
        build_task_set,
    )
    from grader.toolcall.extract import Call, Extraction, extract
    from grader.toolcall.match import match_call
    from grader.verdict import NO_CALL_REASON, REASON_CODES, ReasonCode, Verdict
    from grader.version import GRADER_RULES_VERSION, __version__

# Public name -> the module that defines it (imported on first use of the name).
_HOMES: dict[str, str] = {
    "Calibration": "grader.analysis.calibration",
    "CalibrationError": "grader.analysis.calibration",
    "bias_corrected_pass_rate": "grader.analysis.calibration",
    "calibrate": "grader.analysis.calibration",
    "tpr_tnr": "grader.analysis.calibration",
    "GradedAnswer": "grader.api",
    "RunResult": "grader.api",
    "UnknownTaskError": "grader.api",
    "grade_run": "grader.api",
    "grade_run_async": "grader.api",
    "CHECK_REASON_CODES": "grader.checks",
    "Check": "grader.checks",
    "CheckContext": "grader.checks",
    "CheckDefinitionError": "grader.checks",
    "CheckReasonCode": "grader.checks",
    "CheckResult": "grader.checks",
    "Judge": "grader.checks",
    "JudgeClient": "grader.checks",
    "JudgeConfig": "grader.checks",
    "Sample": "grader.checks",
    "build_check": "grader.checks",
    "build_checks": "grader.checks",
    "Outcome": "grader.engine",
    "grade": "grader.engine",
    "grade_async": "grader.engine",
    "offline_context": "grader.engine",
    "GraderError": "grader.errors",
    "MAX_DEPTH": "grader.json",
    "load_tasks": "grader.loader",
    "parse_task": "grader.loader",
    "CheckTally": "grader.report",
    "Report": "grader.report",
    "Tally": "grader.report",
    "LIVE_FIELDS": "grader.rows",
    "OFFLINE_FIELDS": "grader.rows",
    "ROW_SCHEMA_VERSION": "grader.rows",
    "SAMPLE_FIELDS": "grader.rows",
    "answer_row": "grader.rows",
    "offline_row": "grader.rows",
    "TASK_KEYS": "grader.tasks",
    "CheckDefinition": "grader.tasks",
    "NoExpectedCallError": "grader.tasks",
    "Task": "grader.tasks",
    "TaskHasChecksError": "grader.tasks",
    "TaskLoadError": "grader.tasks",
    "TaskSet": "grader.tasks",
    "build_task_set": "grader.tasks",
    "Call": "grader.toolcall.extract",
    "Extraction": "grader.toolcall.extract",
    "extract": "grader.toolcall.extract",
    "match_call": "grader.toolcall.match",
    "NO_CALL_REASON": "grader.verdict",
    "REASON_CODES": "grader.verdict",
    "ReasonCode": "grader.verdict",
    "Verdict": "grader.verdict",
    "GRADER_RULES_VERSION": "grader.version",
    "__version__": "grader.version",
}


def __getattr__(name: str) -> _typing.Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'grader' has no attribute {name!r}")
    value = getattr(_importlib.import_module(home), name)
    globals()[name] = value  # later lookups find it without this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOMES))


__all__ = [
    "CHECK_REASON_CODES",
    "GRADER_RULES_VERSION",
    "LIVE_FIELDS",
    "MAX_DEPTH",
    "NO_CALL_REASON",
    "OFFLINE_FIELDS",
    "REASON_CODES",
    "ROW_SCHEMA_VERSION",
    "SAMPLE_FIELDS",
    "TASK_KEYS",
    "Calibration",
    "CalibrationError",
    "Call",
    "Check",
    "CheckContext",
    "CheckDefinition",
    "CheckDefinitionError",
    "CheckReasonCode",
    "CheckResult",
    "CheckTally",
    "Extraction",
    "GradedAnswer",
    "GraderError",
    "Judge",
    "JudgeClient",
    "JudgeConfig",
    "NoExpectedCallError",
    "Outcome",
    "ReasonCode",
    "Report",
    "RunResult",
    "Sample",
    "Tally",
    "Task",
    "TaskHasChecksError",
    "TaskLoadError",
    "TaskSet",
    "UnknownTaskError",
    "Verdict",
    "__version__",
    "answer_row",
    "bias_corrected_pass_rate",
    "build_check",
    "build_checks",
    "build_task_set",
    "calibrate",
    "extract",
    "grade",
    "grade_async",
    "grade_run",
    "grade_run_async",
    "load_tasks",
    "match_call",
    "offline_context",
    "offline_row",
    "parse_task",
    "score",
    "tpr_tnr",
]
