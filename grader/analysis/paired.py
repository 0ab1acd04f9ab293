"""Primary vs shadow, pair by pair: rates, wins/losses/ties and an exact McNemar test.

A *pair* is one ``primary`` row and one ``shadow`` row with the same ``pair_id`` and ``choice``:
the same request, answered by the two upstreams. Only complete pairs are compared, so both
sides are measured on exactly the same requests and every rate difference is
``(wins - losses) / pairs``. Rows without a pair id, pairs missing a side, and pairs with a
leg twice or two different tasks are counted and left out.

A pair is *discordant* when exactly one side passed. Under the null hypothesis "both upstreams
pass equally often", a discordant pair is equally likely to go either way, so the number of
shadow wins among ``n = wins + losses`` discordant pairs is Binomial(n, 1/2). The exact
two-sided McNemar p-value is ``min(1, 2 * P(X <= min(wins, losses)))``, computed here with
integers and :class:`fractions.Fraction`: no floating point, no scipy.

Pure: no I/O; ``gradeproxy/cli/compare.py`` reads the files.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from fractions import Fraction
from math import comb
from typing import Any, Literal

Variant = Literal["primary", "shadow"]
RESULTS = ("pass", "fail", "stale")
NO_KIND = "none"


@dataclass(frozen=True, slots=True)
class Leg:
    """The fields of one result row that a comparison needs."""

    pair_id: str
    choice: int
    variant: Variant
    task_id: str
    mutation_kind: str | None
    result: str
    cost: float | None = None  # the response's ``cost``, on its choice-0 leg only (once each)


@dataclass(frozen=True, slots=True)
class Pair:
    task_id: str
    mutation_kind: str
    primary: str  # pass | fail | stale
    shadow: str
    primary_cost: float | None = None
    shadow_cost: float | None = None


@dataclass(slots=True)
class Pairing:
    """Complete pairs, and how many candidates were left out and why."""

    pairs: list[Pair] = field(default_factory=list)
    incomplete: int = 0  # one side only
    conflicting: int = 0  # a side twice, or the two sides name different tasks


def pair_legs(legs: Iterable[Leg]) -> Pairing:
    """Group legs by ``(pair_id, choice)`` and keep exactly-one-per-side groups."""
    groups: dict[tuple[str, int], list[Leg]] = defaultdict(list)
    for leg in legs:
        groups[(leg.pair_id, leg.choice)].append(leg)
    out = Pairing()
    for group in groups.values():
        sides = {leg.variant for leg in group}
        if len(group) != len(sides):
            out.conflicting += 1
        elif sides != {"primary", "shadow"}:
            out.incomplete += 1
        else:
            primary, shadow = sorted(group, key=lambda leg: leg.variant)
            if primary.task_id != shadow.task_id:
                out.conflicting += 1
                continue
            kind = primary.mutation_kind or NO_KIND
            out.pairs.append(
                Pair(
                    primary.task_id,
                    kind,
                    primary.result,
                    shadow.result,
                    primary.cost,
                    shadow.cost,
                )
            )
    return out


def mcnemar_exact(losses: int, wins: int) -> Fraction:
    """Exact two-sided McNemar p-value for ``losses`` (b) and ``wins`` (c) discordant pairs."""
    if losses < 0 or wins < 0:
        raise ValueError("counts must be >= 0")
    n = losses + wins
    if n == 0:
        return Fraction(1)
    tail = sum(comb(n, k) for k in range(min(losses, wins) + 1))
    return min(Fraction(1), Fraction(2 * tail, 2**n))


def _rate(count: int, total: int) -> float | None:
    return count / total if total else None


@dataclass(frozen=True, slots=True)
class Comparison:
    """Primary vs shadow over the complete pairs of one group."""

    group: str
    pairs: int
    primary_pass: int
    shadow_pass: int
    primary_stale: int
    shadow_stale: int
    wins: int  # the shadow passed, the primary did not
    losses: int  # the primary passed, the shadow did not

    @property
    def ties(self) -> int:
        return self.pairs - self.wins - self.losses

    @property
    def p_value(self) -> Fraction:
        return mcnemar_exact(self.losses, self.wins)

    def to_dict(self) -> dict[str, Any]:
        p = self.p_value
        return {
            "pairs": self.pairs,
            "primary": {
                "pass": self.primary_pass,
                "pass_rate": _rate(self.primary_pass, self.pairs),
                "stale": self.primary_stale,
                "stale_rate": _rate(self.primary_stale, self.pairs),
            },
            "shadow": {
                "pass": self.shadow_pass,
                "pass_rate": _rate(self.shadow_pass, self.pairs),
                "stale": self.shadow_stale,
                "stale_rate": _rate(self.shadow_stale, self.pairs),
            },
            "wins": self.wins,
            "losses": self.losses,
            "ties": self.ties,
            "mcnemar": {
                "b": self.losses,
                "c": self.wins,
                "p_value": float(p),
                "p_value_exact": f"{p.numerator}/{p.denominator}",
            },
        }


def compare(group: str, pairs: Iterable[Pair]) -> Comparison:
    counts = {"pairs": 0, "pp": 0, "sp": 0, "ps": 0, "ss": 0, "wins": 0, "losses": 0}
    for pair in pairs:
        p_pass, s_pass = pair.primary == "pass", pair.shadow == "pass"
        counts["pairs"] += 1
        counts["pp"] += p_pass
        counts["sp"] += s_pass
        counts["ps"] += pair.primary == "stale"
        counts["ss"] += pair.shadow == "stale"
        counts["wins"] += s_pass and not p_pass
        counts["losses"] += p_pass and not s_pass
    return Comparison(
        group,
        counts["pairs"],
        counts["pp"],
        counts["sp"],
        counts["ps"],
        counts["ss"],
        counts["wins"],
        counts["losses"],
    )


def compare_by(pairs: list[Pair], key: Callable[[Pair], str]) -> list[Comparison]:
    """One comparison per group, groups sorted by name."""
    groups: dict[str, list[Pair]] = defaultdict(list)
    for pair in pairs:
        groups[key(pair)].append(pair)
    return [compare(name, groups[name]) for name in sorted(groups)]


@dataclass(frozen=True, slots=True)
class Summary:
    """Everything ``gradeproxy compare`` reports."""

    overall: Comparison
    by_task: list[Comparison]
    by_mutation_kind: list[Comparison]
    incomplete: int
    conflicting: int
    rows: int
    unpaired_rows: int  # rows with no pair id or variant, or a result outside pass|fail|stale
    cost: dict[str, Any] | None = None  # :func:`cost_per_pass`; None when no row had a cost

    def to_dict(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "pairs": self.overall.pairs,
            "incomplete_pairs": self.incomplete,
            "conflicting_pairs": self.conflicting,
            "unpaired_rows": self.unpaired_rows,
            "overall": self.overall.to_dict(),
            "by_task": {c.group: c.to_dict() for c in self.by_task},
            "by_mutation_kind": {c.group: c.to_dict() for c in self.by_mutation_kind},
            "cost": self.cost,
        }


def cost_per_pass(pairs: Iterable[Pair]) -> dict[str, Any] | None:
    """Per variant, over the complete pairs: the summed ``cost`` of its responses, its passing
    answers, and their ratio (cost per passing answer); ``unpriced`` counts the pairs whose side
    had no cost. None when no pair has a cost at all (rows written without ``pricing.path``)."""
    total = {"primary": 0.0, "shadow": 0.0}
    passing = {"primary": 0, "shadow": 0}
    priced = {"primary": 0, "shadow": 0}
    for pair in pairs:
        for side, result, cost in (
            ("primary", pair.primary, pair.primary_cost),
            ("shadow", pair.shadow, pair.shadow_cost),
        ):
            passing[side] += result == "pass"
            if cost is not None:
                total[side] += cost
                priced[side] += 1
    if not priced["primary"] and not priced["shadow"]:
        return None
    return {
        side: {
            "cost": round(total[side], 12),
            "priced_responses": priced[side],
            "pass": passing[side],
            "cost_per_pass": round(total[side] / passing[side], 12) if passing[side] else None,
        }
        for side in ("primary", "shadow")
    }


def summarise(legs: Iterable[Leg], rows: int, unpaired_rows: int) -> Summary:
    pairing = pair_legs(legs)
    return Summary(
        overall=compare("all", pairing.pairs),
        by_task=compare_by(pairing.pairs, lambda p: p.task_id),
        by_mutation_kind=compare_by(pairing.pairs, lambda p: p.mutation_kind),
        incomplete=pairing.incomplete,
        conflicting=pairing.conflicting,
        rows=rows,
        unpaired_rows=unpaired_rows,
        cost=cost_per_pass(pairing.pairs),
    )
