"""Task loading: a definition parsed, validated and turned into a :class:`~grader.tasks.Task`.

Apart from :mod:`grader.tasks` because validating a check definition means reading it with its
check type's own reader (unknown fields, unresolvable templates, invalid schemas, a pass rule
naming no column are all refused there), and that needs every check implementation, while a
task only *holds* the validated definitions. So ``grader.tasks`` imports no check code, and
this module is where a definition meets the checks:

* every problem stops loading with ``file:line: message`` and nothing half-loaded is returned,
  so a bad edit can never replace a good task set in a running proxy;
* the checks built to validate a task are handed to the engine's cache
  (:func:`grader.engine.remember_checks`, keyed by the task's ``checks_digest``), so a task
  loaded here is never built a second time in this process;
* a task pickles as its definition (``raw`` and ``source``, registered with :mod:`copyreg`
  here) and is parsed, validated and built again on the other side: built checks hold compiled
  validators that do not pickle, and a grading process must grade with exactly the checks the
  definition gives.
"""

from __future__ import annotations

import copyreg
import dataclasses
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grader.advisory import AdvisoryError, split_advisory
from grader.checks import Check, CheckDefinitionError, build_checks, columns_of
from grader.checks.tool_call import DEFAULT_DEFINITION
from grader.engine import remember_checks
from grader.json import NOT_READ, JSONError, loads_exact, read_plain_bytes
from grader.tasks import (
    RECORD_KEYS,
    TASK_KEYS,
    CheckDefinition,
    Task,
    TaskLoadError,
    TaskSet,
    build_task_set,
    checks_digest,
    task_files,
)
from grader.toolcall.extract import Call, call_from_value, extract

if TYPE_CHECKING:  # types only: their modules load when a task has an episode or enforce entry
    from grader.enforce import EnforceSpec
    from grader.episodes.values import EpisodeRecord

__all__ = ["check_task_keys", "iter_file_tasks", "load_tasks", "parse_task"]

_TASK_KEYS = frozenset(TASK_KEYS)
_NO_NAMES: frozenset[str] = frozenset()  # a task without advisory checks
# Names from other formats that mean one of ours (too far apart for a spelling suggestion).
_ALIASES = {"task_id": "id", "grader": "checks", "graders": "checks", "expected_call": "expected"}


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
    import difflib  # a misspelt key only: not at every start-up

    close = close or difflib.get_close_matches(key, TASK_KEYS, n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}?" if close else f"known keys: {', '.join(TASK_KEYS)}"
    return TaskLoadError(f"{label}unknown key {key!r}: {hint}")


def check_task_keys(obj: Mapping[str, Any]) -> None:
    """Refuse a top-level key no part of the grader reads (see :data:`grader.tasks.TASK_KEYS`)."""
    if _TASK_KEYS.issuperset(obj):  # every key known (nearly every task): one set question
        return
    for key in obj:
        if key not in _TASK_KEYS:
            task_id = obj.get("id")
            label = f"task {task_id!r}: " if isinstance(task_id, str) and task_id else ""
            raise _unknown_key(str(key), label)


def _definitions(
    obj: Mapping[str, Any],
    source: str,
    calls: tuple[Call | None, Call | None],
    parsed: bool,
) -> tuple[tuple[CheckDefinition, ...], tuple[Check, ...], frozenset[str]]:
    """Validate the task's checks by building them: their definitions, the built checks (digests
    as the definitions say) and the advisory names. ``calls``: the task's expected and stale
    calls, read already; ``parsed``: see :func:`_parse_task`. Raises
    CheckDefinitionError/AdvisoryError."""
    if "expected" not in obj and "checks" not in obj:
        return (), (), frozenset()  # an episode-only task: no per-turn checks
    advice = split_advisory(obj, source)
    task = obj if advice is None else advice.task
    built = build_checks(task, calls, parsed=parsed)
    if advice is not None and advice.digests:
        # A check citing a calibration record: its digest covers the record.
        built = tuple(
            dataclasses.replace(check, digest=advice.digests[i])  # type: ignore[type-var]
            if i in advice.digests
            else check
            for i, check in enumerate(built)
        )
    listed = task.get("checks")
    definitions = []
    for index, check in enumerate(built):  # one check per definition listed, in its order
        if isinstance(listed, list):  # a parsed task's definitions are its own: kept, not copied
            where = f"checks[{index}]"
            definition = listed[index] if parsed else dict(listed[index])
        else:  # grading.md's tool-call check
            where, definition = "", dict(DEFAULT_DEFINITION)
        definitions.append(
            CheckDefinition(
                check.name,
                check.type,
                check.digest,
                definition,
                columns_of(check),
                check.needs_judge,
                where,
            )
        )
    return tuple(definitions), built, _NO_NAMES if advice is None else advice.names


def _stale(metadata: Mapping[str, Any], expected: Call | None, task_id: str) -> Call | None:
    if metadata.get("stale") is None:
        return None
    stale = _call(metadata["stale"], f"task {task_id!r}: 'metadata.stale'")
    if expected is None:
        raise TaskLoadError(
            f"task {task_id!r}: 'metadata.stale' needs an 'expected' call beside it"
        )
    if stale.canonical == expected.canonical:
        raise TaskLoadError(
            f"task {task_id!r}: 'metadata.stale' equals 'expected' after canonicalisation, so a "
            "correct answer would be flagged stale"
        )
    return stale


def _enforce(
    obj: Mapping[str, Any],
    task_id: str,
    definitions: tuple[CheckDefinition, ...],
    has_stale: bool,
    episode: EpisodeRecord | None,
) -> EnforceSpec | None:
    """The task's ``enforce`` entry, its checks resolved (grader/enforce.py); None without one."""
    if "enforce" not in obj:
        return None
    # Imported here: only a task the proxy acts on has an entry (none of a benchmark's).
    from grader.enforce import EnforceError, parse_enforce, resolve_targets

    label = f"task {task_id!r}"
    try:
        spec = parse_enforce(obj["enforce"], label)
        authority = episode is not None and episode.allowed_actions is not None
        return resolve_targets(spec, definitions, label, has_stale, authority)
    except EnforceError as exc:
        raise TaskLoadError(str(exc)) from None


def _parse(obj: Any, source: str, parsed: bool = False) -> tuple[Task, tuple[Check, ...]]:
    if not isinstance(obj, dict):
        raise TaskLoadError(f"a task must be a JSON object, got {type(obj).__name__}")
    check_task_keys(obj)
    task_id = obj.get("id")
    if not isinstance(task_id, str) or not task_id:
        raise TaskLoadError("'id' must be a non-empty string")
    status = obj.get("status")
    if status == "draft":
        raise TaskLoadError(
            f"task {task_id!r} is a draft (status: draft): review it, then turn it into a task"
            " with 'gradeproxy tasks promote' (docs/review.md)"
        )
    if status is not None:
        raise TaskLoadError(f"task {task_id!r}: 'status' can only be 'draft' (or absent)")
    if "expected" not in obj and "checks" not in obj and "episode" not in obj:
        raise TaskLoadError(f"task {task_id!r} has no 'expected' call")
    episode = None
    if "episode" in obj:
        # Imported here: the episodes' record parser (and its columns, replay and action
        # rules) is needed only by task sets that grade whole agent runs.
        from grader.episodes.record import RecordError, parse_record

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
    stale = _stale(metadata, expected, task_id)
    kind = metadata.get("mutationKind")
    if kind is not None and not isinstance(kind, str):
        raise TaskLoadError(f"task {task_id!r}: 'metadata.mutationKind' must be a string")
    try:
        definitions, built, advisory = _definitions(obj, source, (expected, stale), parsed)
    except (CheckDefinitionError, AdvisoryError) as exc:
        raise TaskLoadError(f"task {task_id!r}: {exc}") from None
    enforce = _enforce(obj, task_id, definitions, stale is not None, episode)
    # Positional, in Task's field order: keywords to a class make a dict per call (per task).
    # A task parsed here from its line is held by nothing else: kept as read, not copied.
    task = Task(
        task_id,
        expected,  # expected_call
        stale,
        kind,  # mutation_kind
        metadata if parsed else dict(metadata),
        obj if parsed else dict(obj),  # raw
        source,
        definitions,  # checks
        episode,
        advisory,
        checks_digest(obj, definitions, parsed=parsed),
        enforce,
    )
    return task, built


def parse_task(obj: Any, source: str = "<memory>") -> Task:
    """Validate one task definition; raise :class:`TaskLoadError` naming ``source``."""
    return _parse_task(obj, source)


def _parse_task(obj: Any, source: str, parsed: bool = False) -> Task:
    """:func:`parse_task`; ``parsed``: ``obj`` was read from JSON text by :mod:`grader.json`
    (its digests are written without reading orjson's text back, the same text)."""
    try:
        task, built = _parse(obj, source, parsed)
    except TaskLoadError as exc:
        raise TaskLoadError(f"{source}: {exc}") from None
    if built:
        remember_checks(task, built)
    return task


def _reduce_task(task: Task) -> tuple[Any, ...]:
    """Pickle a parsed task as its definition; the other side parses (and validates) it again."""
    if not task.raw:
        raise TypeError(f"task {task.id!r} was built by hand: only parsed tasks pickle")
    return (parse_task, (dict(task.raw), task.source))


copyreg.pickle(Task, _reduce_task)


def iter_file_tasks(path: Path) -> Iterator[Task]:
    """Parse one JSONL task file, line by line."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TaskLoadError(f"{path}: cannot read task file: {exc}") from None
    # Lines are read from their bytes, with no decoded copy of the file beside them; a line
    # orjson does not read exactly takes the text path.
    for lineno, raw in enumerate(_lines(data), start=1):
        obj = read_plain_bytes(raw)
        if obj is NOT_READ:
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise _not_utf8(data, path) from None
            if not line.strip():
                continue
            try:
                obj = loads_exact(line)
            except JSONError as exc:
                raise TaskLoadError(f"{path}:{lineno}: not valid JSON: {exc}") from None
        yield _parse_task(obj, f"{path}:{lineno}", parsed=True)


def _lines(data: bytes) -> Iterator[bytes]:
    """``data.splitlines()``, a line at a time: split at "\n", "\r\n" and "\r" alone (JSON's
    own line ends: a string may hold U+2028 raw). A file without "\r" (nearly every one) is
    cut at each "\n" found by ``bytes.find`` (a memchr), where ``splitlines`` tests every
    byte for both ends; each line is freed once parsed, not kept to the end."""
    if data.find(b"\r") >= 0:
        yield from data.splitlines()
        return
    start = 0
    end = data.find(b"\n")
    while end >= 0:
        yield data[start:end]
        start = end + 1
        end = data.find(b"\n", start)
    if start < len(data):
        yield data[start:]


def _not_utf8(data: bytes, path: Path) -> TaskLoadError:
    """The error of a task file that is not UTF-8, naming the offset in the file."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return TaskLoadError(f"{path}: cannot read task file: {exc}")
    return TaskLoadError(f"{path}: cannot read task file: not UTF-8")


def load_tasks(path: str | Path) -> TaskSet:
    """Load a task file or a folder of ``*.jsonl`` files, all or nothing."""
    files = task_files(Path(path))
    tasks = [task for file in files for task in iter_file_tasks(file)]
    if not tasks:
        raise TaskLoadError(f"{path}: no tasks defined")
    return build_task_set(tasks, tuple(str(f) for f in files), parsed=True)
