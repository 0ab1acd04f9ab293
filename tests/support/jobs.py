"""Grade jobs as the handler builds them, for tests that drive the grade queue or the writer
thread without a proxy in front."""

from __future__ import annotations

import time

from grader.tasks import Task
from proxy.pipeline.grade import GradeJob


def grade_job_of(request_id: str, task: Task, response: bytes = b"{}") -> GradeJob:
    """A non-streamed job whose response is ``response``, finished now."""
    return GradeJob(
        request_id=request_id,
        task=task,
        tasks_digest="d",
        upstream="u",
        stream=False,
        request_body=b"{}",
        response=[response],
        finished_at=time.perf_counter(),
    )
