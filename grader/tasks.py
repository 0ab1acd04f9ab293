"""What a task is: its validated definition, the check definitions it lists, and the digests.

A task file is JSONL, one task a line::

    {"id": "...", "expected": <call object or JSON string>,
     "metadata": {"stale": <call, JSON string or null>, "mutationKind": <str or null>, ...},
     "checks": [<check definition>, ...], "item": {...}, "pass_rule": "all"}

``checks`` is optional (docs/grading.md): without it a task has grading.md's tool-call check and
must have ``expected``; with it, ``expected`` is needed only by checks that grade against it.
``episode`` is seed 001's grader record for whole agent runs (docs/episodes.md); a task with
only an ``episode`` has no per-turn checks at all. ``enforce`` names the checks the proxy acts on
before the client gets the answer (grader/enforce.py, docs/enforce.md).

The top-level keys a task may have are named once, here, in :data:`TASK_KEYS` (and seed 001's
record keys, refused at the top level, in :data:`RECORD_KEYS`); :mod:`grader.loader` refuses any
other key with ``file:line`` and a "did you mean" suggestion.

A task holds check *definitions* (:class:`CheckDefinition`: the validated mapping, its name,
type, digest and columns), never built checks: building them is the engine's job
(:func:`grader.engine.checks_of`, cached by :attr:`Task.checks_digest`), and validating them is
the loader's. This module therefore imports no check implementation (a ``lint-imports``
contract), which is what breaks the old cycle tasks → checks → tool_call → score → tasks.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grader.errors import GraderError
from grader.toolcall.canon import canonical_json, canonical_json_parsed
from grader.toolcall.extract import Call
from grader.values import value_type
from grader.version import GRADER_RULES_VERSION

if TYPE_CHECKING:  # types only: the episodes' values are imported by task sets that use them
    from grader.enforce import EnforceSpec
    from grader.episodes.values import EpisodeRecord

# Every top-level key a task may have. ``metadata`` is open (users' annotations); inside a
# check, OpenAI's grader fields are accepted as OpenAI defines them (grader.checks).
TASK_KEYS: tuple[str, ...] = (
    "id",
    "expected",
    "metadata",
    "checks",
    "item",
    "pass_rule",
    "prompt",
    "tools",
    "episode",
    # ``"draft"`` on a task drafted from traffic (``gradeproxy tasks draft``): refused by the
    # loader until ``gradeproxy tasks promote`` removes it (grader/drafts.py).
    "status",
    "enforce",
)
# Seed 001's grader-record keys: they belong inside the task's ``episode`` record, where they
# are graded (docs/episodes.md); at the top level they would be silently ignored, so refused.
RECORD_KEYS: tuple[str, ...] = (
    "schema_version",
    "target_state",
    "snapshot",
    "forbidden_changes",
    "required_links",
    "allowed_actions",
    "expected_outcome",
    "accepted_alternatives",
    "root_cause",
    "evidence_ids",
    "side_effects",
    "rubric",
)


class TaskLoadError(GraderError, ValueError):
    """A task file or task definition is unusable; the message names file and line."""


class NoExpectedCallError(GraderError, LookupError):
    """The task has no ``expected`` call (its checks do not need one): grade it with
    :func:`grader.grade`, which runs its checks."""


class TaskHasChecksError(GraderError, ValueError):
    """``score()`` was asked for the tool-call verdict alone of a task that has ``checks``:
    grade it with :func:`grader.grade`, which runs every check."""


@value_type
class CheckDefinition:
    """One validated check definition: what the task says, not the code that grades it.

    Plain data, so a task pickles, compares and prints as what its file says. ``definition`` is
    the mapping as validated (``advisory``/``calibration`` taken off, grader/advisory.py);
    ``digest`` is the column digest every result row carries (a cited calibration record
    included); ``where`` is the definition's place in the task (``checks[2]``; empty for the
    tool-call check of a task without ``checks``), which the engine builds it under.
    """

    name: str
    type: str
    digest: str
    definition: Mapping[str, Any]
    columns: tuple[str, ...]
    needs_judge: bool = False
    where: str = ""


@value_type
class Task:
    """One gradable task: its check definitions, the expected call and the stale one.

    ``expected_call`` is None only for a task whose ``checks`` need no expected call; reading
    :attr:`expected` on such a task raises :class:`NoExpectedCallError`, so code written for
    tasks that always have one (``score()``) fails loudly instead of grading against nothing.
    ``checks_digest`` names everything the built checks depend on (:func:`checks_digest`):
    the engine's cache of built checks is keyed by it; a task built by hand has ``""`` and is
    built afresh each time it is graded.
    """

    id: str
    expected_call: Call | None
    stale: Call | None = None
    mutation_kind: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    raw: Mapping[str, Any] = field(default_factory=dict)
    source: str = "<memory>"
    checks: tuple[CheckDefinition, ...] = ()
    episode: EpisodeRecord | None = None  # seed 001's grader record (docs/episodes.md)
    # Names of advisory checks (grader/advisory.py): shown, never part of the verdict.
    advisory: frozenset[str] = frozenset()
    checks_digest: str = ""
    # What the proxy enforces before the client gets an answer (grader/enforce.py); None: off.
    enforce: EnforceSpec | None = None

    @property
    def expected(self) -> Call:
        if self.expected_call is None:
            raise NoExpectedCallError(
                f"task {self.id!r} has no expected call; grade it with grader.grade"
            )
        return self.expected_call

    @property
    def has_checks(self) -> bool:
        """Whether the task lists its own checks (else grading.md's tool-call check alone)."""
        return "checks" in self.raw

    @property
    def pass_rule(self) -> str:
        rule = self.raw.get("pass_rule", "all")
        return rule if isinstance(rule, str) else "all"

    @property
    def tools(self) -> list[dict[str, Any]] | None:
        """The task's own ``tools`` list (the offline stand-in for the request's)."""
        tools = self.raw.get("tools")
        return [t for t in tools if isinstance(t, dict)] if isinstance(tools, list) else None

    @property
    def item(self) -> dict[str, Any]:
        """The ``item`` namespace: the task's ``item``, ``prompt`` defaulting to its prompt."""
        raw_item = self.raw.get("item")
        item = dict(raw_item) if isinstance(raw_item, Mapping) else {}
        prompt = self.raw.get("prompt")
        if isinstance(prompt, str):
            item.setdefault("prompt", prompt)
        return item


@value_type
class TaskSet:
    """A validated, immutable set of tasks and its digest."""

    tasks: Mapping[str, Task]
    digest: str
    sources: tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self.tasks)

    def __contains__(self, task_id: object) -> bool:
        return task_id in self.tasks

    def __iter__(self) -> Iterator[Task]:
        return iter(self.tasks.values())

    def get(self, task_id: str) -> Task | None:
        return self.tasks.get(task_id)


def checks_digest(
    raw: Mapping[str, Any], definitions: Iterable[CheckDefinition], *, parsed: bool = False
) -> str:
    """sha256 of what a task's built checks depend on: the rules version, each definition's
    digest (and place), the expected call and the stale one. Two tasks with the same digest
    build the same checks, whatever their ids, metadata or files. ``parsed``: ``raw`` was read
    from JSON text (see :func:`tasks_digest`); the digest is the same."""
    metadata = raw.get("metadata")
    # A dict is told apart by its type first: an ABC's isinstance runs Python code.
    stale = None
    if type(metadata) is dict or isinstance(metadata, Mapping):
        stale = metadata.get("stale")
    expected = raw.get("expected")
    if expected is None and stale is None:  # its checks carry their calls (parallel, no call)
        text = "[null,null]"  # the canonical text of [None, None], written once
    else:
        calls = [expected, stale]
        text = canonical_json_parsed(calls).decode() if parsed else canonical_json(calls)
    parts = [GRADER_RULES_VERSION, text]
    for d in definitions:  # a loop: a task has one or two (a comprehension is a call)
        parts.append(f"{d.where}={d.digest}")
    return "sha256:" + hashlib.sha256("\n".join(parts).encode()).hexdigest()


def tasks_digest(raw_tasks: Iterable[Mapping[str, Any]], *, parsed: bool = False) -> str:
    """sha256 of the canonical task set plus the grading rules version.

    ``parsed``: every definition was read from JSON text by :mod:`grader.json` (the loader's
    tasks), so each is written by :func:`canonical_json_parsed`; the digest is the same."""
    head = (GRADER_RULES_VERSION + "\n").encode()
    if parsed:  # the list's text, a task at a time (each one level down), hashed in pieces
        digest = hashlib.sha256(head + b"[")
        comma = b""
        for raw in sorted(raw_tasks, key=_task_id):
            digest.update(comma)
            digest.update(canonical_json_parsed(raw, 1))
            comma = b","
        digest.update(b"]")
        return "sha256:" + digest.hexdigest()
    ordered = sorted((dict(raw) for raw in raw_tasks), key=_task_id)
    body = canonical_json(ordered).encode()
    return "sha256:" + hashlib.sha256(head + body).hexdigest()


def _task_id(raw: Mapping[str, Any]) -> str:
    return str(raw["id"])


def digest_of(tasks: Iterable[Task]) -> str:
    """The digest of the distinct task definitions graded against (inline tasks have no file).

    Copies of one definition count once, and the order they came in never changes the digest,
    so it equals ``load_tasks(...).digest`` for a file holding exactly those tasks.
    """
    distinct = {canonical_json(dict(task.raw)): task.raw for task in tasks}
    return tasks_digest(distinct[key] for key in sorted(distinct))


def build_task_set(
    tasks: Iterable[Task], sources: tuple[str, ...] = (), *, parsed: bool = False
) -> TaskSet:
    """Index tasks by id, refusing duplicates, and compute the digest (``parsed``: every task
    was read from JSON text, see :func:`tasks_digest`)."""
    by_id: dict[str, Task] = {}
    for task in tasks:
        if task.id in by_id:
            raise TaskLoadError(
                f"{task.source}: duplicate task id {task.id!r} (first at {by_id[task.id].source})"
            )
        by_id[task.id] = task
    digest = tasks_digest((task.raw for task in by_id.values()), parsed=parsed)
    return TaskSet(by_id, digest, sources)


def task_files(path: Path) -> list[Path]:
    """The task files a path names: itself, or every ``*.jsonl`` below a folder, sorted.

    Hidden entries are skipped: a Kubernetes ConfigMap mounted as a folder holds a second copy
    of every file under ``..<timestamp>/``, which would load every task twice.
    """
    if path.is_dir():
        files = sorted(
            p
            for p in path.rglob("*.jsonl")
            if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts)
        )
        if not files:
            raise TaskLoadError(f"{path}: no *.jsonl task files in this folder")
        return files
    if path.is_file():
        return [path]
    raise TaskLoadError(f"{path}: no such task file or folder")
