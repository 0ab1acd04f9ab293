"""Admission, the pipeline's first stage: is this request graded, and if not, why not.

Decided before anything is forwarded, from the method, the path and the headers alone (the
body is not parsed), so every skip is counted and none costs the client time. The reasons a
response goes ungraded are one closed set, :data:`SkipReason`: the metric contract
(``proxy/pipeline/record/metrics.py``) exports exactly these label values, and the later stages
(``proxy/pipeline/capture/delivered.py``, the grade queue, episodes) name their skips from it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal, get_args

from grader.tasks import Task, TaskSet
from proxy.config import Grading

# The APIs whose responses the proxy can capture, by the route label they are counted under.
Api = Literal["chat_completions", "responses"]
Route = Literal["chat_completions", "responses", "other"]

SkipReason = Literal[
    "no_task_header",
    "unknown_task",
    "upstream_error",
    "client_disconnected",
    "queue_full",
    "sampled_out",
    "empty_response",
    "unsupported_route",
    "shutdown",
    # the decoded answer is over ``limits.max_capture_bytes``: the proxy kept only part of it
    "capture_limit",
    # agent episodes (proxy/pipeline/episodes.py): a turn that is not the last of an
    # episode-only task, an episode whose history the request does not carry whole, an episode
    # over a limit
    "episode_turn",
    "episode_incomplete",
    "episode_limit",
]
SKIP_REASONS: Final[tuple[SkipReason, ...]] = get_args(SkipReason)

CHAT_PATH: Final = "/v1/chat/completions"
RESPONSES_PATH: Final = "/v1/responses"
# The routes whose responses the proxy can capture and grade (POST only), by route label.
GRADED_ROUTES: Final[dict[str, Api]] = {
    CHAT_PATH: "chat_completions",
    RESPONSES_PATH: "responses",
}


def sampled(key: str, rate: float) -> bool:
    """Deterministic sampling: the same key gets the same decision in every replica."""
    if rate >= 1.0:
        return True
    if rate <= 0.0:
        return False
    digest = hashlib.sha256(key.encode()).digest()
    return int.from_bytes(digest[:8], "big") < rate * 2**64


@dataclass(slots=True)
class Admission:
    """One request's admission; ``skip`` may still be set by a later stage (the relay's
    outcome), which is why this is not frozen."""

    api: Api | None  # None: not a graded route (any method but POST, any other path)
    task_id: str | None
    task: Task | None
    tasks: TaskSet | None
    key: str  # the sampling key, shared by grading and shadow sampling
    skip: SkipReason | None
    # An untagged request sampled for a capture row (results.capture_untagged): not graded
    # (its skip stays ``no_task_header``), but relayed with a capture copy.
    untagged: bool = False

    @property
    def route(self) -> Route:
        return self.api or "other"

    @property
    def capturing(self) -> bool:
        """Whether the relay keeps a copy of the response, for grading or a capture row."""
        return self.untagged or (self.task is not None and self.skip is None)

    def failed(self, reason: SkipReason) -> SkipReason | None:
        """The skip to count for a request whose relay failed or was cut (``reason``): its own
        skip when it had one, else ``reason`` on a graded route; None for a plain forwarded
        request, which no skip counter covers."""
        if self.api is None and self.skip is None:
            return None
        self.skip = self.skip or reason
        return self.skip


def admit(
    method: str,
    path: str,
    headers: Mapping[str, str],
    grading: Grading,
    tasks: TaskSet | None,
    request_id: str,
) -> Admission:
    """Whether a request is graded: a task named on a graded route, loaded, and sampled in.

    A request that names a task on any other route is forwarded and counted as skipped
    (``unsupported_route``): the proxy cannot read an answer from it, and saying so beats a
    silent ``graded: false``.
    """
    api = GRADED_ROUTES.get(path) if method == "POST" else None
    task_id = headers.get(grading.task_header) if api is not None else None
    task = tasks.get(task_id) if tasks is not None and task_id else None
    # One sampling key for grading and shadows: a shadowed request is always a graded one.
    key = headers.get(grading.sampling_header or "") or request_id
    skip: SkipReason | None = None
    if api is None:
        if grading.task_header in headers:
            skip = "unsupported_route"
            task_id = headers.get(grading.task_header)
    elif not task_id:
        skip = "no_task_header"
    elif task is None:
        skip = "unknown_task"
    elif not sampled(key, grading.sample_rate):
        skip = "sampled_out"
    return Admission(api, task_id, task, tasks, key, skip)


def capture_untagged(admission: Admission, rate: float) -> None:
    """Mark an untagged request on a graded route for a capture row when the sampling key
    is sampled in at ``rate`` (``results.capture_untagged``; the same hash as grading's)."""
    if admission.skip == "no_task_header" and rate > 0 and sampled(admission.key, rate):
        admission.untagged = True
