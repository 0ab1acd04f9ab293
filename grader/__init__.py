"""gradeproxy's grader: grading.md's tool-call grader and the checks, as a pure library.

No I/O in the grading path and no aiohttp: the proxy, the offline CLI and every other scoring
surface grade through one engine here (``grade``/``grade_async`` → ``Outcome``; rows from
``grader.rows``, reports from ``grader.report``; docs/checks-contract.md). The public API is
curated in ``__all__`` (a test keeps it complete), one name per concept; the exact-number JSON
reader is ``grader.json``. Every exception derives from ``GraderError`` (``grader/errors.py``).
"""

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
from grader.score import score
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
