"""An on-disk cache of loaded task sets: the tasks and their built checks, reused while
neither the task files nor the grader's code change.

Loading a task set validates every definition by building its checks (each expected call
compiled with its rules, every digest written): most of what ``gradeproxy grade`` spends on a
large imported set such as BFCL's. A command run again on the same task file can read that
work back instead (``gradeproxy grade --task-cache DIR``; docs/offline.md).

Correctness: an entry is named by a sha256 of everything a load depends on, and an entry that
does not match is never read:

* each task file's path (tasks carry ``file:line``) and its whole content;
* the grader's code: every ``.py`` file of the ``grader`` package, by content (a checkout
  edited in place changes it as surely as a release does), the grading rules version, the
  Python version and orjson's;
* this module's format version.

Only task sets that depend on nothing else are cached: every check a ``tool_call`` check (other
kinds may hold compiled validators or a judge's settings), no episode, no check citing a
calibration record (a file of its own, outside the key). Any other set loads as without a
cache. An entry that cannot be read (truncated, foreign, another format) is ignored and
written again; a cache that cannot be written costs nothing but the attempt.

The entries are pickles, and reading a pickle runs whatever code it names: an entry is read
only from a folder and a file owned by this user that nobody else can write (the folder is
created 0700, entries 0600). Point ``--task-cache`` at a folder of your own.
"""

from __future__ import annotations

import copyreg
import dataclasses
import hashlib
import io
import os
import pickle
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Any

import orjson

from grader.built import checks_of, remember_checks
from grader.checks import Check
from grader.checks.call_match import Rules
from grader.checks.tool_call import ToolCallCheck
from grader.loader import load_tasks
from grader.tasks import CheckDefinition, Task, TaskSet, task_files
from grader.toolcall.canon import Duration
from grader.version import GRADER_RULES_VERSION

__all__ = ["CACHE_FORMAT", "cache_key", "code_digest", "load_tasks_cached"]

CACHE_FORMAT = "gradeproxy-task-cache-2"
_GRADER_ROOT = Path(__file__).resolve().parent


def code_digest(root: Path = _GRADER_ROOT) -> bytes:
    """sha256 of every ``.py`` file below ``root``, the grader package (path and content)."""
    digest = hashlib.sha256()
    for folder, dirs, names in os.walk(root):
        dirs.sort()
        relative = os.path.relpath(folder, root)
        for name in sorted(names):
            if name.endswith(".py"):
                with open(os.path.join(folder, name), "rb") as handle:
                    content = handle.read()
                digest.update(f"{relative}/{name}\0{len(content)}\0".encode())
                digest.update(content)
    return digest.digest()


def cache_key(files: Iterable[Path]) -> str:
    """The entry name of a load of ``files`` by this grader (see the module docstring)."""
    digest = hashlib.sha256()
    head = (CACHE_FORMAT, sys.version, GRADER_RULES_VERSION, orjson.__version__)
    digest.update("\0".join(head).encode())
    digest.update(code_digest())
    for file in files:
        content = file.read_bytes()
        digest.update(f"\0{file}\0{len(content)}\0".encode())
        digest.update(content)
    return digest.hexdigest()


def _private(path: Path) -> bool:
    """Whether ``path`` is this user's and writable by nobody else (a pickle is code)."""
    try:
        info = path.stat()
    except OSError:
        return False
    return info.st_uid == os.getuid() and not info.st_mode & 0o022


# The copyreg reducer ``grader.loader`` registers pickles a task as its definition, parsed
# again on the other side: what this cache avoids, so its pickler leaves that reducer out. The
# frozen dataclasses a task set holds are pickled as a call of the class on their field values:
# their own ``__setstate__`` looks the fields up per object, a third of reading an entry back.
_FROZEN: tuple[type, ...] = (Task, TaskSet, CheckDefinition, ToolCallCheck, Rules, Duration)


def _by_fields(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    def reduce(obj: Any) -> tuple[Any, ...]:
        return type(obj), tuple([getattr(obj, name) for name in names])

    return reduce


_DISPATCH: dict[type, Any] = {
    kind: reducer for kind, reducer in copyreg.dispatch_table.items() if kind is not Task
}
_DISPATCH.update(
    {kind: _by_fields(tuple(f.name for f in dataclasses.fields(kind))) for kind in _FROZEN}
)


def _pickler(buffer: IO[bytes]) -> pickle.Pickler:
    pickler = pickle.Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.dispatch_table = _DISPATCH
    return pickler


def _cacheable(tasks: TaskSet) -> bool:
    for task in tasks:
        if task.episode is not None:
            return False
        for definition in task.checks:
            if definition.type != "tool_call" or "calibration" in definition.definition:
                return False
        checks = task.raw.get("checks")
        if isinstance(checks, list) and any(
            isinstance(c, dict) and "calibration" in c for c in checks
        ):
            return False
        if not all(isinstance(check, ToolCallCheck) for check in checks_of(task)):
            return False
    return True


def _read(entry: Path, key: str) -> TaskSet | None:
    if not (_private(entry.parent) and _private(entry)):
        return None
    try:
        with entry.open("rb") as handle:
            stored = pickle.load(handle)  # our own entry, checked private above
        form, stored_key, tasks, built = stored
        if form != CACHE_FORMAT or stored_key != key or not isinstance(tasks, TaskSet):
            return None
    except Exception:  # a damaged or foreign entry is a miss, never an error
        return None
    for task, checks in zip(tasks, built, strict=True):
        remember_checks(task, checks)
    return tasks


def _write(entry: Path, key: str, tasks: TaskSet) -> None:
    built: list[tuple[Check, ...]] = [checks_of(task) for task in tasks]
    buffer = io.BytesIO()
    try:
        _pickler(buffer).dump((CACHE_FORMAT, key, tasks, built))
    except Exception:  # something that does not pickle: this set is loaded afresh each time
        return
    temporary = entry.with_name(f".{entry.name}.{os.urandom(6).hex()}.tmp")
    try:
        entry.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(buffer.getbuffer())
        os.replace(temporary, entry)
    except OSError:
        temporary.unlink(missing_ok=True)


def load_tasks_cached(path: str | Path, cache_dir: Path) -> TaskSet:
    """:func:`grader.loader.load_tasks` through the cache in ``cache_dir``: the stored task
    set when an entry matches, else a fresh load (stored when the set is cacheable). Errors
    are :func:`load_tasks`'s: a file that does not load is never cached."""
    files = task_files(Path(path))
    key = cache_key(files)
    entry = cache_dir / f"{key}.pickle"
    found = _read(entry, key) if entry.exists() else None
    if found is not None:
        return found
    tasks = load_tasks(path)
    # Stored only if the files still hash to the key: a file rewritten while it was being
    # loaded must not be stored under the name of its old content.
    if _cacheable(tasks) and cache_key(files) == key:
        _write(entry, key, tasks)
    return tasks
