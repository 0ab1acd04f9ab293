"""gradeproxy's grader: grading.md's tool-call grader as a pure library.

No I/O in the grading path and no aiohttp: the proxy, the offline CLI and every other scoring
surface share this package. The public API is curated in ``__all__`` (a test keeps it complete).
"""

from grader._json import MAX_DEPTH
from grader.extract import Call, Extraction, extract
from grader.report import Report, Tally
from grader.score import score
from grader.tasks import Task, TaskLoadError, TaskSet, build_task_set, load_tasks, parse_task
from grader.verdict import NO_CALL_REASON, REASON_CODES, ReasonCode, Verdict
from grader.version import GRADER_RULES_VERSION, __version__

__all__ = [
    "GRADER_RULES_VERSION",
    "MAX_DEPTH",
    "NO_CALL_REASON",
    "REASON_CODES",
    "Call",
    "Extraction",
    "ReasonCode",
    "Report",
    "Tally",
    "Task",
    "TaskLoadError",
    "TaskSet",
    "Verdict",
    "__version__",
    "build_task_set",
    "extract",
    "load_tasks",
    "parse_task",
    "score",
]
