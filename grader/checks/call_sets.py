"""The answer's calls as a set: parsed once, paired with the expected calls one to one.

:func:`answer_calls` reads every call of an answer exactly once (no canonicalisation: matching
canonicalises the values it compares, cached on the :class:`AnswerCall`); :func:`max_matching`
pairs expected calls with answer calls; :func:`schema_numeric_mismatch` is the strictness
``numbers: "from_request"`` adds from the request's tool schema.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from grader.checks.call_answer import AnswerCall
from grader.checks.call_match import Mismatch
from grader.checks.call_rules import Path, path_text
from grader.checks.sample import Sample
from grader.json import MAX_DEPTH, JSONError, loads_exact, loads_plain, value_depth
from grader.toolcall.extract import Extraction, extract

R = TypeVar("R")
C = TypeVar("C")
_DEPTH_OK = MAX_DEPTH - 2  # extract.usable_call canonicalises arguments from depth 2


# Answer calls of the parallel form by name and arguments text: answers to one task repeat most
# of their calls verbatim (several runs of a model; in BFCL's parallel answers, two calls in
# three), and a call written as an earlier one is that call, its arguments parsed and their
# canonical values cached already. Shared only where no call leaves the grader (the parallel
# form's results name none), and bounded: emptied when full, and never a long text (a call
# that large rarely repeats, and the table would hold it whole).
_REMEMBERED: dict[tuple[object, object], AnswerCall] = {}  # (name, arguments text): strings
_REMEMBERED_MAX = 1024
REMEMBERED_CHARS = 1024
# A remembered call's fits (:attr:`AnswerCall.fits`) are keyed by expected call, and a proxy
# that reloads its tasks builds new expected calls each time: emptied past this many, a call
# that keeps being met never holds a replaced task set's expected calls for long.
FITS_MAX = 256


def _parsed(function: Any, plain: bool = False, remember: bool = False) -> AnswerCall:
    """A ``tool_calls`` function as an :class:`AnswerCall`, under grading.md's usability rules
    (``null``/``""``/absent arguments mean ``{}``, a string must hold a JSON object), without
    the canonicalisation ``extract.usable_call`` adds: matching canonicalises what it compares.
    ``plain``: the answer text held no string with a long digit run (``Sample.plain``), so the
    arguments text is not searched again.

    ``shallow`` is settled from the JSON text when it holds too few brackets to nest past the
    bound (a text that short, or ``str.count``: cheap; walking the parsed value is not).
    ``remember``: a call whose arguments came as text is shared (``_REMEMBERED``; the caller
    looked it up there, and found none)."""
    if not isinstance(function, dict):
        return AnswerCall(None, None)
    name = function.get("name")
    if not isinstance(name, str):
        return AnswerCall(None, None)
    raw = function.get("arguments")
    if raw is None or raw == "":
        call = AnswerCall(name, {})
    elif isinstance(raw, str):
        try:
            arguments = loads_plain(raw) if plain else loads_exact(raw)
        except JSONError:  # JSONTooDeepError included
            arguments = None
        shallow = len(raw) <= _DEPTH_OK or raw.count("{") + raw.count("[") <= _DEPTH_OK
        usable = arguments if isinstance(arguments, dict) else None
        call = AnswerCall(name, usable, True if shallow else None)
        if remember and len(raw) <= REMEMBERED_CHARS:
            if len(_REMEMBERED) >= _REMEMBERED_MAX:
                _REMEMBERED.clear()
            _REMEMBERED[name, raw] = call
    else:
        call = AnswerCall(name, raw if isinstance(raw, dict) else None)
    return call


def usable_depth(call: AnswerCall) -> bool:
    """Whether the call's arguments nest shallowly enough to be usable (``extract``'s bound);
    a deeper one never matches anyway (its values cannot be canonicalised), so only the
    single-call form's "last usable call" rule needs to ask. Arguments holding no object or
    array (most calls) are one level deep: no walk is needed to say so."""
    arguments = call.arguments
    if arguments is None:
        return False
    shallow = call.shallow
    if shallow is None:
        shallow = True
        for value in arguments.values():
            if isinstance(value, dict | list):
                shallow = value_depth(arguments) <= _DEPTH_OK
                break
        call.shallow = shallow  # set once: answers graded in threads may share the call
    return shallow


def answer_calls(
    sample: Sample, found: Extraction | None = None, remember: bool = False
) -> list[AnswerCall]:
    """Every call of the answer, parsed once: each ``output_tools`` element (``arguments`` None
    when unusable), else the one call extracted from the text (``found``: the caller's own
    extraction of it, so the text is scanned once). The same calls, in the same order, as
    ``grader.checks._base.sample_calls``. ``remember``: calls written as text are shared with
    earlier answers' (:func:`_parsed`): for a caller that hands no call out."""
    if sample.output_tools:
        plain = sample.plain
        calls = []
        for tool in sample.output_tools:
            function = tool.get("function")
            if remember and type(function) is dict:  # a call met before is taken as it is
                try:  # by its name and arguments text; an unhashable one was never kept
                    known = _REMEMBERED.get((function.get("name"), function.get("arguments")))
                except TypeError:
                    known = None
                if known is not None:
                    if len(known.fits) >= FITS_MAX:
                        known.fits.clear()
                    calls.append(known)
                    continue
            calls.append(_parsed(function, plain, remember))
        return calls
    call = (found if found is not None else extract(sample.answer)).call
    if call is None:
        return []
    # extract's call is usable: within the depth bound
    return [AnswerCall(call.name, call.arguments, shallow=True)]


def max_matching(
    rows: Sequence[R],
    cols: Sequence[C],
    fit: Callable[[R, C], bool],
    perfect: bool = False,
    memos: Sequence[dict[R, bool]] | None = None,
) -> list[int | None]:
    """Maximum one-to-one matching of ``rows`` with ``cols`` (pairs ``fit`` accepts); the
    partner column (its index in ``cols``) of each row, or None.

    A first-fit pass over free columns comes first (what BFCL's checker does, and all a correct
    answer in any order usually needs), then Kuhn's augmenting paths for the rows it left
    unmatched: BFCL's first-fit alone fails a correct answer whose first call fits two
    expected calls; a maximum matching never does. ``fit`` is asked at most once per pair,
    with the row and column themselves (no closure over indices): its answers are kept in
    ``memos``, one dict per column keyed by the row (fresh ones when not given), which may
    outlive the matching (an answer call's own: :attr:`AnswerCall.fits`). So rows must hash,
    and rows equal as values share one answer: they must fit alike (an ``ExpectedCall`` is
    equal to itself alone).

    With ``perfect``, stop at the first row no augmenting path reaches (Kuhn: such a row stays
    unmatched in every maximum matching grown from this one), leaving later rows None.
    """
    if memos is None:
        memos = [{} for _ in cols]
    owner: list[int | None] = [None] * len(cols)
    partner: list[int | None] = [None] * len(rows)
    for row, wanted in enumerate(rows):
        for col, memo in enumerate(memos):
            if owner[col] is None:
                found = memo.get(wanted)
                if found is None:
                    found = memo[wanted] = fit(wanted, cols[col])
                if found:
                    owner[col] = row
                    partner[row] = col
                    break
    if None not in partner:  # first fit matched every row: no augmenting path to look for
        return partner
    for row in range(len(rows)):
        unreached = partner[row] is None and not _augment(
            row, set(), rows, cols, fit, memos, owner, partner
        )
        if unreached and perfect:
            break
    return partner


def _augment(
    row: int,
    seen: set[int],
    rows: Sequence[R],
    cols: Sequence[C],
    fit: Callable[[R, C], bool],
    memos: Sequence[dict[R, bool]],
    owner: list[int | None],
    partner: list[int | None],
) -> bool:
    """Kuhn: whether an augmenting path from ``row`` exists; if so, the matching takes it.
    A function of the first fit's state passed in, neither a closure that calls itself (its
    own cell, a reference cycle that kept every answer it reached alive until the cycle
    collector ran) nor an object holding that state (built for two answers in three)."""
    wanted = rows[row]
    for col, memo in enumerate(memos):
        if col in seen:
            continue
        found = memo.get(wanted)
        if found is None:  # a pair the first fit did not ask
            found = memo[wanted] = fit(wanted, cols[col])
        if found:
            seen.add(col)
            held = owner[col]
            if held is None or _augment(held, seen, rows, cols, fit, memos, owner, partner):
                owner[col], partner[row] = row, col
                return True
    return False


def schema_numeric_mismatch(arguments: Any, schema: Any, path: Path = ()) -> Mismatch | None:
    """The first value the schema types ``integer`` that is not written as one (``5.0``).

    Walks ``properties`` and ``items`` only: the strictness ``numbers: "from_request"`` adds
    on top of matching. Everything else about the schema is ``json_schema``'s job.
    """
    if not isinstance(schema, Mapping):
        return None
    declared = schema.get("type")
    if declared == "integer" or declared == ["integer"]:
        if isinstance(arguments, float):
            where = path_text(path) if path else "arguments"
            return Mismatch(
                "numeric_type_mismatch", where, f"{where}: expected an integer, got {arguments!r}"
            )
        return None
    properties = schema.get("properties")
    if isinstance(arguments, dict) and isinstance(properties, Mapping):
        for key in sorted(arguments):
            found = schema_numeric_mismatch(arguments[key], properties.get(key), (*path, key))
            if found is not None:
                return found
    items = schema.get("items")
    if isinstance(arguments, list) and isinstance(items, Mapping):
        for index, value in enumerate(arguments):
            found = schema_numeric_mismatch(value, items, (*path, index))
            if found is not None:
                return found
    return None
