"""The episode report: per-column pass rates and the mean ``evidence_overlap``.

At most once per episode: a retried final turn (or one sent to another replica) can grade the
same episode twice, so rows are keyed by ``episode_id`` and the last row of an id wins. Error
columns (``passed`` None) are counted apart and kept out of the denominators, as for checks.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from grader.episodes.record import COLUMNS


@dataclass(slots=True)
class EpisodeReport:
    tasks_digest: str
    rows: dict[str, Mapping[str, Any]] = field(default_factory=dict)

    def add(self, row: Mapping[str, Any]) -> None:
        self.rows.pop(row["episode_id"], None)  # the last row of an id wins, in its new place
        self.rows[row["episode_id"]] = row

    def extend(self, rows: Iterable[Mapping[str, Any]]) -> None:
        for row in rows:
            self.add(row)

    def to_dict(self) -> dict[str, Any]:
        results = Counter(row["result"] for row in self.rows.values())
        columns: dict[str, dict[str, Any]] = {}
        for name in COLUMNS:
            verdicts = [
                c["passed"]
                for row in self.rows.values()
                for c in row["columns"]
                if c["name"] == name
            ]
            if not verdicts:
                continue  # absent everywhere: absent from the report too
            graded = [v for v in verdicts if v is not None]
            passed = sum(1 for v in graded if v)
            columns[name] = {
                "n": len(graded),
                "passed": passed,
                "errors": len(verdicts) - len(graded),
                "passRate": passed / len(graded) if graded else None,
            }
        overlaps = [
            row["evidence_overlap"] for row in self.rows.values() if "evidence_overlap" in row
        ]
        return {
            "tasks_digest": self.tasks_digest,
            "episodes": len(self.rows),
            "results": {key: results.get(key, 0) for key in ("pass", "fail", "error")},
            "columns": columns,
            "evidence_overlap_mean": sum(overlaps) / len(overlaps) if overlaps else None,
        }

    def render_table(self) -> str:
        data = self.to_dict()
        lines = [
            f"episodes: {data['episodes']}  pass {data['results']['pass']}  "
            f"fail {data['results']['fail']}  error {data['results']['error']}",
            f"{'column':<22}{'n':>6}{'passed':>8}{'errors':>8}{'pass rate':>11}",
        ]
        for name, c in data["columns"].items():
            rate = "-" if c["passRate"] is None else f"{c['passRate']:.3f}"
            lines.append(f"{name:<22}{c['n']:>6}{c['passed']:>8}{c['errors']:>8}{rate:>11}")
        mean = data["evidence_overlap_mean"]
        if mean is not None:
            lines.append(f"mean evidence_overlap: {mean:.3f}")
        return "\n".join(lines)
