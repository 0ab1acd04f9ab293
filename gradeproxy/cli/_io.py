"""File helpers for the offline commands: JSONL reading with file:line errors, atomic writes.

Wherever a command reads result rows (``--results``, ``--baseline``, ``--candidate``) a
``postgresql://`` URL stands for a file: :func:`results_source` keeps it whole (argparse's
``Path`` would fold its ``//``) and :func:`read_jsonl` reads the rows database
(proxy/rowsdb.py) instead, the URL's password masked in every message.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias, cast

from grader.errors import GraderError
from grader.intake import Intake
from grader.json import JSONError, dumps_line, loads_exact

if TYPE_CHECKING:
    from proxy.rowsdb import RowsURL

# Where result rows are read from: a file or the rows database. proxy.rowsdb is imported only
# when a URL is given, so the offline commands start without the server stack.
Source: TypeAlias = "Path | RowsURL"


class InputError(GraderError, ValueError):
    """Unreadable or invalid input; the message names file and line. Exit code 2."""


def add_strict(parser: argparse.ArgumentParser, what: str = "row") -> None:
    """``--strict``, the same on every batch command: the old refuse-everything behaviour."""
    parser.add_argument(
        "--strict",
        action="store_true",
        help=f"refuse the whole run at the first bad {what} (exit 2, nothing written)",
    )


def add_no_rotations(parser: argparse.ArgumentParser) -> None:
    """``--no-rotations`` for the commands that read result rows."""
    parser.add_argument(
        "--no-rotations",
        action="store_true",
        help="read only the files named, not their .1 .2 … rotations",
    )


def is_database(text: str) -> bool:
    """A ``postgresql://`` (or ``postgres://``) URL, as proxy.rowsdb reads them."""
    scheme, found, _ = text.partition("://")
    return bool(found) and scheme.lower() in ("postgresql", "postgres")


def results_source(text: str) -> Source:
    """An argparse ``type``: a rows-database URL (filters in its query), else a path."""
    if is_database(text):
        from proxy.rowsdb import RowsDatabaseError, parse_url

        try:
            return parse_url(text)
        except RowsDatabaseError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return Path(text)


def source_lines(
    intake: Intake, source: Source, *, unreadable: bool = False
) -> Iterator[tuple[int, Any]]:
    """``intake.lines`` for a file; for a rows database, ``(n, row)`` in the order written."""
    if isinstance(source, Path):
        yield from intake.lines(source, unreadable=unreadable)
        return
    from proxy.rowsdb import RowsDatabaseError, read_rows

    try:
        for number, row in read_rows(source):
            intake.rows += 1
            yield number, row
    except RowsDatabaseError as exc:
        raise InputError(str(exc)) from None


def read_jsonl(path: Path) -> Iterator[tuple[int, Any]]:
    """Yield ``(line number, value)`` for every non-blank line."""
    try:
        with path.open(encoding="utf-8") as handle:
            for lineno, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    yield lineno, loads_exact(line)
                except JSONError as exc:
                    raise InputError(f"{path}:{lineno}: not valid JSON: {exc}") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text: {exc}") from None


GLOB_CHARACTERS = frozenset("*?[")


def expand_globs(values: Iterable[Source]) -> list[Source]:
    """Each path as given, or the files a glob in it matches, sorted, each once.

    ``gradeproxy serve --workers N`` writes ``grades.w0.jsonl`` … one file per worker, so the
    commands that read result rows take ``'results/grades.w*.jsonl'`` quoted and expand it
    themselves (the same on every shell, and past the shell's argument limit). A path that
    names a file is never read as a pattern, and a pattern that matches nothing is an error
    (a typo must not read as an empty run).
    """
    found: dict[Source, None] = {}
    for value in values:
        if not isinstance(value, Path):  # a rows database: no glob, no file
            found.setdefault(value, None)
            continue
        text = str(value)
        if GLOB_CHARACTERS.isdisjoint(text) or value.exists():
            found.setdefault(value, None)
            continue
        import glob  # a pattern was given: not at every start-up

        matches = sorted(glob.glob(text))
        if not matches:
            raise InputError(f"{text}: no file matches")
        for match in matches:
            found.setdefault(Path(match), None)
    return list(found)


class ExpandGlobs(argparse.Action):
    """``nargs="+"`` paths with globs expanded (:func:`expand_globs`); no match: a usage error."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[object] | None,
        option_string: str | None = None,
    ) -> None:
        items = values if isinstance(values, list) else [values]
        # type=results_source made each a Path or a rows-database URL already
        given = [Path(v) if isinstance(v, str) else cast("Source", v) for v in items]
        try:
            setattr(namespace, self.dest, expand_globs(given))
        except InputError as exc:
            parser.error(f"argument {option_string}: {exc}")


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def output_mode() -> int:
    """The mode an ordinary ``open()`` would give a new file: 0644 under umask 022.

    ``mkstemp`` creates its file 0600 (it is meant for secrets); an output file is data for
    other tools and users, so the temporary file gets the usual mode before the rename.
    """
    return 0o666 & ~_umask()


def write_atomically(path: Path, chunks: Iterable[bytes]) -> None:
    """Write to a temporary file beside ``path`` and rename: never a half-written output.

    ``chunks`` may be produced as they are written (a streamed ``grade`` run) and raise part
    way, when a run is refused: then nothing is left, neither the temporary file nor the
    folders made for ``path``."""
    made = _make_folders(path.parent)
    tmp = None
    try:
        fd, tmp = _temporary_beside(path)
        os.fchmod(fd, output_mode())
        with os.fdopen(fd, "wb") as handle:
            for chunk in chunks:
                handle.write(chunk)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        for folder in made:  # deepest first; one that holds something else now stays
            try:
                folder.rmdir()
            except OSError:
                break
        raise


def _make_folders(folder: Path) -> list[Path]:
    """Make ``folder`` and its missing parents; the ones made, deepest first."""
    missing = []
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    if missing:
        missing[0].mkdir(parents=True, exist_ok=True)
    return missing


def _temporary_beside(path: Path) -> tuple[int, str]:
    """A new file ``.<name>.<random>.tmp`` beside ``path``, created exclusively, mode 0600:
    what ``tempfile.mkstemp`` makes, without importing tempfile (and its random module) into
    every command's start-up."""
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        name = str(path.parent / f".{path.name}.{os.urandom(6).hex()}.tmp")
        try:
            return os.open(name, flags, 0o600), name
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name beside {path}")


JSONL_BATCH = 512  # rows per chunk handed to the file: one write call each, not one a row


def jsonl_bytes(rows: Iterable[Any]) -> Iterator[bytes]:
    """The rows as JSONL, :data:`JSONL_BATCH` lines a chunk (each line ``dumps_line``'s)."""
    return batched_lines(dumps_line(row) for row in rows)


def batched_lines(lines: Iterable[bytes]) -> Iterator[bytes]:
    """JSONL lines already written, :data:`JSONL_BATCH` of them a chunk.

    Each chunk is joined from an ``islice`` of the lines, in C: no Python step a line. A line
    is never empty (it ends in its newline), so an empty chunk is the end."""
    remaining = iter(lines)
    while chunk := b"".join(islice(remaining, JSONL_BATCH)):
        yield chunk


class Progress:
    """A one-line progress bar on stderr, shown only where a person is watching."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.total = total
        self.enabled = enabled and total > 0
        self._shown = -1

    def update(self, done: int) -> None:
        if not self.enabled:
            return
        percent = 100 * done // self.total
        if percent == self._shown:
            return
        self._shown = percent
        filled = percent * 30 // 100
        sys.stderr.write(f"\rgrading [{'#' * filled}{'.' * (30 - filled)}] {percent:3d}% ")
        if done >= self.total:
            sys.stderr.write("\n")
        sys.stderr.flush()
