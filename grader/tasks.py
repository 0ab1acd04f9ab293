"""Task files: loading, validation, and the digest that names what a result was graded against.

A task file is JSONL, one task a line::

    {"id": "...", "expected": <call object or JSON string>,
     "metadata": {"stale": <call, JSON string or null>, "mutationKind": <str or null>, ...},
     "checks": [<check definition>, ...], "item": {...}, "pass_rule": "all"}

``checks`` is optional (docs/grading.md): without it a task has grading.md's tool-call check and
must have ``expected``; with it, ``expected`` is needed only by checks that grade against it.
``episode`` is seed 001's grader record for whole agent runs (docs/episodes.md); a task with
only an ``episode`` has no per-turn checks at all.

The top-level keys a task may have are named once, in :data:`TASK_KEYS`; any other key fails
loading with ``file:line``, the key and a "did you mean" suggestion, and the keys of seed 001's
grader record (:data:`RECORD_KEYS`) at the top level are refused with a message pointing into
``episode``, where they are graded: a key that is read by nobody must never look enforced.
``metadata`` stays open for users' own annotations.

A :class:`Task` pickles as its definition (``raw`` and ``source``) and is rebuilt, validated
again, on the other side: built checks hold compiled validators that do not pickle, and a
grading process must grade with exactly the checks the definition gives.

Loading is all-or-nothing: the first problem stops it with ``file:line: message`` and nothing
half-loaded is returned, so a bad edit can never replace a good task set in a running proxy.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grader._json import JSONError, loads_exact
from grader.advisory import AdvisoryError, split_advisory
from grader.checks import Check, CheckDefinitionError, build_checks
from grader.episodes.record import EpisodeRecord, RecordError, parse_record
from grader.errors import GraderError
from grader.toolcall.canon import canonical_json
from grader.toolcall.extract import Call, call_from_value, extract
from grader.version import GRADER_RULES_VERSION

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
# Names from other formats that mean one of ours (too far apart for a spelling suggestion).
_ALIASES = {"task_id": "id", "grader": "checks", "graders": "checks", "expected_call": "expected"}


class TaskLoadError(GraderError, ValueError):
    """A task file or task definition is unusable; the message names file and line."""


class NoExpectedCallError(GraderError, LookupError):
    """The task has no ``expected`` call (its checks do not need one): grade it with
    :func:`grader.grade`, which runs its checks."""


class TaskHasChecksError(GraderError, ValueError):
    """``score()`` was asked for the tool-call verdict alone of a task that has ``checks``:
    grade it with :func:`grader.grade`, which runs every check."""


@dataclass(frozen=True, slots=True)
class Task:
    """One gradable task: its checks, the expected call and the stale pre-migration call.

    ``expected_call`` is None only for a task whose ``checks`` need no expected call; reading
    :attr:`expected` on such a task raises :class:`NoExpectedCallError`, so code written for
    tasks that always have one (``score()``) fails loudly instead of grading against nothing.
    """

    id: str
    expected_call: Call | None
    stale: Call | None = None
    mutation_kind: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    raw: Mapping[str, Any] = field(default_factory=dict)
    source: str = "<memory>"
    checks: tuple[Check, ...] = ()
    episode: EpisodeRecord | None = None  # seed 001's grader record (docs/episodes.md)
    # Names of advisory checks (grader/advisory.py): shown, never part of the verdict.
    advisory: frozenset[str] = frozenset()

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

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle the definition; the other side rebuilds (and re-validates) the checks."""
        if not self.raw:
            raise TypeError(f"task {self.id!r} was built by hand: only parsed tasks pickle")
        return (parse_task, (dict(self.raw), self.source))


@dataclass(frozen=True, slots=True)
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


def _call(value: Any, what: str) -> Call:
    """A task's call: an object (wrappers allowed) or a JSON string holding one."""
    call = extract(value).call if isinstance(value, str) else call_from_value(value)
    if call is None:
        raise TaskLoadError(
            f"{what} is not a usable call: it needs a string 'name' and an object 'arguments'"
        )
    return call


def _unknown_key(key: str, label: str) -> TaskLoadError:
    if key in RECORD_KEYS:
        return TaskLoadError(
            f"{label}'{key}' is a grader-record key (seed 001): it is graded inside the task's "
            "'episode' record (docs/episodes.md), never at the top level, where it would be "
            "mistaken for an enforced check; move it under 'episode' (or 'metadata' to keep it "
            "as an annotation)"
        )
    close = [_ALIASES[key]] if key in _ALIASES else []
    close = close or difflib.get_close_matches(key, TASK_KEYS, n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}?" if close else f"known keys: {', '.join(TASK_KEYS)}"
    return TaskLoadError(f"{label}unknown key {key!r}: {hint}")


def check_task_keys(obj: Mapping[str, Any]) -> None:
    """Refuse a top-level key no part of the grader reads (see :data:`TASK_KEYS`)."""
    for key in obj:
        if key not in TASK_KEYS:
            task_id = obj.get("id")
            label = f"task {task_id!r}: " if isinstance(task_id, str) and task_id else ""
            raise _unknown_key(str(key), label)


def parse_task(obj: Any, source: str = "<memory>") -> Task:
    """Validate one task definition; raise :class:`TaskLoadError` naming ``source``."""
    try:
        if not isinstance(obj, dict):
            raise TaskLoadError(f"a task must be a JSON object, got {type(obj).__name__}")
        check_task_keys(obj)
        task_id = obj.get("id")
        if not isinstance(task_id, str) or not task_id:
            raise TaskLoadError("'id' must be a non-empty string")
        if "expected" not in obj and "checks" not in obj and "episode" not in obj:
            raise TaskLoadError(f"task {task_id!r} has no 'expected' call")
        episode = None
        if "episode" in obj:
            try:
                episode = parse_record(obj["episode"])
            except RecordError as exc:
                raise TaskLoadError(f"task {task_id!r}: {exc}") from None
        expected = None
        if "expected" in obj:
            expected = _call(obj["expected"], f"task {task_id!r}: 'expected'")
        metadata = obj.get("metadata")
        if metadata is None:
            metadata = {}
        if not isinstance(metadata, dict):
            raise TaskLoadError(f"task {task_id!r}: 'metadata' must be an object")
        stale = None
        if metadata.get("stale") is not None:
            stale = _call(metadata["stale"], f"task {task_id!r}: 'metadata.stale'")
            if expected is None:
                raise TaskLoadError(
                    f"task {task_id!r}: 'metadata.stale' needs an 'expected' call beside it"
                )
            if stale.canonical == expected.canonical:
                raise TaskLoadError(
                    f"task {task_id!r}: 'metadata.stale' equals 'expected' after "
                    "canonicalisation, so a correct answer would be flagged stale"
                )
        kind = metadata.get("mutationKind")
        if kind is not None and not isinstance(kind, str):
            raise TaskLoadError(f"task {task_id!r}: 'metadata.mutationKind' must be a string")
        try:
            episode_only = "expected" not in obj and "checks" not in obj
            advice = split_advisory(obj, source)
            checks = (
                ()
                if episode_only
                else tuple(
                    dataclasses.replace(check, digest=advice.digests[i])  # type: ignore[type-var]
                    if i in advice.digests
                    else check
                    for i, check in enumerate(build_checks(advice.task))
                )
            )
            advisory = advice.names
        except (CheckDefinitionError, AdvisoryError) as exc:
            raise TaskLoadError(f"task {task_id!r}: {exc}") from None
    except TaskLoadError as exc:
        raise TaskLoadError(f"{source}: {exc}") from None
    return Task(
        id=task_id,
        expected_call=expected,
        stale=stale,
        mutation_kind=kind,
        metadata=dict(metadata),
        raw=dict(obj),
        source=source,
        checks=checks,
        episode=episode,
        advisory=advisory,
    )


def tasks_digest(raw_tasks: Iterable[Mapping[str, Any]]) -> str:
    """sha256 of the canonical task set plus the grading rules version."""
    ordered = sorted((dict(raw) for raw in raw_tasks), key=lambda raw: str(raw["id"]))
    text = GRADER_RULES_VERSION + "\n" + canonical_json(ordered)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def build_task_set(tasks: Iterable[Task], sources: tuple[str, ...] = ()) -> TaskSet:
    """Index tasks by id, refusing duplicates, and compute the digest."""
    by_id: dict[str, Task] = {}
    for task in tasks:
        if task.id in by_id:
            raise TaskLoadError(
                f"{task.source}: duplicate task id {task.id!r} (first at {by_id[task.id].source})"
            )
        by_id[task.id] = task
    digest = tasks_digest(task.raw for task in by_id.values())
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


def iter_file_tasks(path: Path) -> Iterator[Task]:
    """Parse one JSONL task file, line by line."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskLoadError(f"{path}: cannot read task file: {exc}") from None
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            obj = loads_exact(line)
        except JSONError as exc:
            raise TaskLoadError(f"{where}: not valid JSON: {exc}") from None
        yield parse_task(obj, where)


def load_tasks(path: str | Path) -> TaskSet:
    """Load a task file or a folder of ``*.jsonl`` files, all or nothing."""
    files = task_files(Path(path))
    tasks = [task for file in files for task in iter_file_tasks(file)]
    if not tasks:
        raise TaskLoadError(f"{path}: no tasks defined")
    return build_task_set(tasks, tuple(str(f) for f in files))
