"""A promotion gate over a baseline-vs-candidate comparison (seed 002's ``drift_budget``).

Per frozen task suite: the candidate's pass-rate delta in points, its 95% confidence half-width,
and a decision::

    hard_fail      the drop (baseline - candidate) exceeds hard_fail_threshold_pts
                   (on the point estimate; the interval's bounds are reported beside it, and
                   ``interval_past_threshold`` says whether the whole interval is past it)
    cannot_decide  otherwise, when the half-width is not under half the hard-fail threshold
                   (seed 002: "95% CI half-width comfortably under half the hard-fail
                   threshold"): the item count cannot resolve the threshold
    warn           otherwise, when the drop exceeds noise_tolerance_pts (the warn band)
    pass           otherwise

Items are paired on their key where both runs hold them (offline: ``(task_id, sample_id)``;
live shadow rows: ``(pair_id, choice)``, the same pairs ``compare``'s McNemar uses): the delta
is the mean paired difference and its variance comes from the discordant pairs (Agresti-Min:
half a pair added to each cell, so a run of ties never claims a zero-width interval). Where the
runs share no item the delta is unpaired (Agresti-Caffo: one pass and one fail added to each
side). ``error`` rows are out of every count.

A suite is frozen: ``task_ids`` (the resolved list) or ``match`` (fnmatch globs) with the
``digest`` of the ids it resolved to. Rows whose suite tasks differ from the frozen set are
refused (:class:`GateError`), naming what differs and, for a glob, the digest the rows give.
"""

from __future__ import annotations

import fnmatch
import hashlib
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from grader.errors import GraderError

Decision = Literal["pass", "warn", "cannot_decide", "hard_fail"]
Z95 = 1.959963984540054
EXIT_HARD_FAIL = 1
EXIT_CANNOT_DECIDE = 3
_BUDGET_KEYS = ("noise_tolerance_pts", "hard_fail_threshold_pts")


class GateError(GraderError, ValueError):
    """The gate file or the rows cannot be used; the message says which and why."""


@dataclass(frozen=True, slots=True)
class Item:
    """One graded item of a run: the suite it may belong to, its pairing key, pass or not."""

    task_id: str
    key: tuple[Any, ...] | None  # None: cannot be paired
    passed: bool


@dataclass(frozen=True, slots=True)
class Suite:
    name: str
    task_ids: frozenset[str] | None
    match: tuple[str, ...]
    digest: str | None
    noise_pts: float
    hard_fail_pts: float

    def holds(self, task_id: str) -> bool:
        if self.task_ids is not None:
            return task_id in self.task_ids
        return any(fnmatch.fnmatchcase(task_id, pattern) for pattern in self.match)


def ids_digest(task_ids: Iterable[str]) -> str:
    """The digest a frozen glob suite stores: sha256 of its sorted ids, one a line."""
    text = "\n".join(sorted(set(task_ids)))
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def _points(raw: Mapping[str, Any], key: str, default: Any, where: str) -> float:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise GateError(f"{where}: '{key}' must be a number of points >= 0")
    return float(value)


def parse_gate(raw: Any) -> list[Suite]:
    """Suites from a gate file's data: ``drift_budget`` defaults and a ``suites`` list."""
    if not isinstance(raw, Mapping) or not isinstance(raw.get("suites"), list):
        raise GateError("a gate file is an object with a 'suites' list")
    unknown = sorted(set(raw) - {"drift_budget", "suites"})
    if unknown:
        raise GateError(f"unknown gate key {unknown[0]!r} (known: drift_budget, suites)")
    budget = raw.get("drift_budget") or {}
    if not isinstance(budget, Mapping):
        raise GateError("'drift_budget' must be an object")
    suites: list[Suite] = []
    for index, entry in enumerate(raw["suites"]):
        where = f"suites[{index}]"
        if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
            raise GateError(f"{where}: a suite is an object with a 'name'")
        allowed = {"name", "task_ids", "match", "digest", *_BUDGET_KEYS}
        extra = sorted(set(entry) - allowed)
        if extra:
            raise GateError(
                f"{where}: unknown key {extra[0]!r} (known: {', '.join(sorted(allowed))})"
            )
        ids, match, digest = entry.get("task_ids"), entry.get("match"), entry.get("digest")
        if (ids is None) == (match is None):
            raise GateError(f"{where}: give exactly one of 'task_ids' (frozen) or 'match'")
        if ids is not None and not (
            isinstance(ids, list) and ids and all(isinstance(i, str) for i in ids)
        ):
            raise GateError(f"{where}: 'task_ids' must be a non-empty list of task ids")
        patterns: Any = (match,) if isinstance(match, str) else match
        if match is not None and not (
            isinstance(patterns, list | tuple)
            and patterns
            and all(isinstance(p, str) for p in patterns)
        ):
            raise GateError(f"{where}: 'match' must be a glob or a list of globs")
        if digest is not None and not isinstance(digest, str):
            raise GateError(f"{where}: 'digest' must be a string (sha256:…)")
        noise = _points(entry, "noise_tolerance_pts", budget.get("noise_tolerance_pts", 1), where)
        hard = _points(
            entry, "hard_fail_threshold_pts", budget.get("hard_fail_threshold_pts", 5), where
        )
        if hard <= noise:
            raise GateError(f"{where}: hard_fail_threshold_pts must exceed noise_tolerance_pts")
        suites.append(
            Suite(
                entry["name"],
                frozenset(ids) if ids is not None else None,
                tuple(patterns) if match is not None else (),
                digest if match is not None else None,
                noise,
                hard,
            )
        )
    return suites


def check_frozen(suite: Suite, run: str, task_ids: set[str]) -> None:
    """Refuse a run whose tasks in ``suite`` are not the frozen set."""
    seen = {t for t in task_ids if suite.holds(t)}
    if suite.task_ids is not None:
        missing = sorted(suite.task_ids - seen)
        if missing:
            raise GateError(
                f"suite {suite.name!r}: the {run} rows hold no graded row of {len(missing)} "
                f"frozen task(s) ({', '.join(missing[:5])}): its task set differs"
            )
        return
    found = ids_digest(seen)
    if suite.digest is None:
        raise GateError(
            f"suite {suite.name!r} is not frozen: its match {list(suite.match)} resolves to "
            f'{len(seen)} id(s) in the {run} rows; add  digest: "{found}"  to freeze it '
            "(or list its 'task_ids')"
        )
    if found != suite.digest:
        raise GateError(
            f"suite {suite.name!r}: the {run} rows' tasks matching {list(suite.match)} resolve "
            f"to {len(seen)} id(s) with digest {found}, not the frozen {suite.digest}"
        )


@dataclass(frozen=True, slots=True)
class SuiteResult:
    suite: Suite
    paired: bool
    n: int  # pairs when paired, else baseline + candidate items
    n_baseline: int
    n_candidate: int
    baseline_rate: float | None
    candidate_rate: float | None
    delta_pts: float | None
    half_width_pts: float | None
    left_out: int  # items of one run only, when the others are paired
    decision: Decision

    def to_dict(self) -> dict[str, Any]:
        lo = hi = None
        if self.delta_pts is not None and self.half_width_pts is not None:
            lo, hi = self.delta_pts - self.half_width_pts, self.delta_pts + self.half_width_pts
        hard = self.suite.hard_fail_pts
        return {
            "suite": self.suite.name,
            "paired": self.paired,
            "n": self.n,
            "n_baseline": self.n_baseline,
            "n_candidate": self.n_candidate,
            "left_out_unpaired": self.left_out,
            "baseline_pass_rate": self.baseline_rate,
            "candidate_pass_rate": self.candidate_rate,
            "delta_pts": self.delta_pts,
            "half_width_95_pts": self.half_width_pts,
            "delta_interval_95_pts": None if lo is None else [lo, hi],
            "interval_past_threshold": None if hi is None else hi < -hard,
            "noise_tolerance_pts": self.suite.noise_pts,
            "hard_fail_threshold_pts": hard,
            "decision": self.decision,
        }


def _paired(pairs: Sequence[tuple[bool, bool]]) -> tuple[float, float]:
    """Delta and half-width, in points (delta computed in one division: no 5.000000000000001)."""
    n = len(pairs)
    wins = sum(c and not b for b, c in pairs)
    losses = sum(b and not c for b, c in pairs)
    b, c, m = losses + 0.5, wins + 0.5, n + 2.0
    variance = max((b + c) - (c - b) ** 2 / m, 0.0) / m**2
    return 100 * (wins - losses) / n, 100 * Z95 * math.sqrt(variance)


def _unpaired(base: Sequence[bool], cand: Sequence[bool]) -> tuple[float, float]:
    delta = 100 * (sum(cand) * len(base) - sum(base) * len(cand)) / (len(base) * len(cand))
    pb, pc = (sum(base) + 1) / (len(base) + 2), (sum(cand) + 1) / (len(cand) + 2)
    variance = pb * (1 - pb) / (len(base) + 2) + pc * (1 - pc) / (len(cand) + 2)
    return delta, 100 * Z95 * math.sqrt(variance)


def _decide(suite: Suite, delta_pts: float | None, half_pts: float | None) -> Decision:
    if delta_pts is None or half_pts is None:
        return "cannot_decide"
    drop = -delta_pts
    if drop > suite.hard_fail_pts:
        return "hard_fail"
    if half_pts >= suite.hard_fail_pts / 2:
        return "cannot_decide"
    return "warn" if drop > suite.noise_pts else "pass"


def _index(items: Iterable[Item]) -> dict[tuple[Any, ...], bool]:
    """Items by key; a key held twice in one run pairs with nothing (dropped)."""
    seen: dict[tuple[Any, ...], bool] = {}
    twice: set[tuple[Any, ...]] = set()
    for item in items:
        if item.key is None:
            continue
        if item.key in seen:
            twice.add(item.key)
        seen[item.key] = item.passed
    return {k: v for k, v in seen.items() if k not in twice}


def evaluate(suite: Suite, baseline: Sequence[Item], candidate: Sequence[Item]) -> SuiteResult:
    """One suite's delta, half-width and decision; paired on the items both runs hold."""
    base = [i for i in baseline if suite.holds(i.task_id)]
    cand = [i for i in candidate if suite.holds(i.task_id)]
    b_rate = sum(i.passed for i in base) / len(base) if base else None
    c_rate = sum(i.passed for i in cand) / len(cand) if cand else None
    b_index, c_index = _index(base), _index(cand)
    shared = sorted(b_index.keys() & c_index.keys(), key=repr)
    delta = half = None
    if shared:
        pairs = [(b_index[k], c_index[k]) for k in shared]
        delta, half = _paired(pairs)
        n, left_out = len(pairs), len(base) + len(cand) - 2 * len(pairs)
        b_rate = sum(b for b, _ in pairs) / n
        c_rate = sum(c for _, c in pairs) / n
    else:
        n, left_out = len(base) + len(cand), 0
        if base and cand:
            delta, half = _unpaired([i.passed for i in base], [i.passed for i in cand])
    return SuiteResult(
        suite,
        bool(shared),
        n,
        len(base),
        len(cand),
        b_rate,
        c_rate,
        delta,
        half,
        left_out,
        _decide(suite, delta, half),
    )


def exit_code(results: Sequence[SuiteResult]) -> int:
    """1 for any hard fail, else 3 for any suite that cannot be decided, else 0."""
    decisions = {r.decision for r in results}
    if "hard_fail" in decisions:
        return EXIT_HARD_FAIL
    if "cannot_decide" in decisions:
        return EXIT_CANNOT_DECIDE
    return 0
