"""gradeproxy's grader: grading.md's tool-call grader as a pure library.

No I/O in the grading path and no aiohttp: the proxy, the offline CLI and every other scoring
surface share this package. The public API is curated in ``__all__`` (a test keeps it complete).
"""

from grader._json import MAX_DEPTH
from grader.api import GradedAnswer, RunResult, UnknownTaskError, score_run, task_from_dict
from grader.calibration import (
    Calibration,
    CalibrationError,
    bias_corrected_pass_rate,
    calibrate,
    tpr_tnr,
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
    TaskOutcome,
    build_check,
    build_checks,
    evaluate,
    evaluate_sync,
)
from grader.extract import Call, Extraction, extract
from grader.report import Report, Tally
from grader.score import score
from grader.tasks import (
    NoExpectedCallError,
    Task,
    TaskLoadError,
    TaskSet,
    build_task_set,
    load_tasks,
    parse_task,
)
from grader.verdict import NO_CALL_REASON, REASON_CODES, ReasonCode, Verdict
from grader.version import GRADER_RULES_VERSION, __version__

__all__ = [
    "CHECK_REASON_CODES",
    "GRADER_RULES_VERSION",
    "MAX_DEPTH",
    "NO_CALL_REASON",
    "REASON_CODES",
    "Calibration",
    "CalibrationError",
    "Call",
    "Check",
    "CheckContext",
    "CheckDefinitionError",
    "CheckReasonCode",
    "CheckResult",
    "Extraction",
    "GradedAnswer",
    "Judge",
    "JudgeClient",
    "JudgeConfig",
    "NoExpectedCallError",
    "ReasonCode",
    "Report",
    "RunResult",
    "Sample",
    "Tally",
    "Task",
    "TaskLoadError",
    "TaskOutcome",
    "TaskSet",
    "UnknownTaskError",
    "Verdict",
    "__version__",
    "bias_corrected_pass_rate",
    "build_check",
    "build_checks",
    "build_task_set",
    "calibrate",
    "evaluate",
    "evaluate_sync",
    "extract",
    "load_tasks",
    "parse_task",
    "score",
    "score_run",
    "task_from_dict",
    "tpr_tnr",
]
