"""The episode columns: one verdict per behaviour of seed 001's grader record.

A column the record does not configure is absent from the row, never vacuously true. Each
column is ``passed`` True/False, or None when no verdict could be reached (an authority rule
that needs a role when the episode has none): the row's ``result`` is then ``error`` and stays
out of every pass-rate denominator, as for any check.

``evidence_overlap`` is a score: F1 between the ids the final answer cites and
``evidence_ids``. An id is cited when it appears as a whole token (a maximal run of letters,
digits, ``_`` and ``-``), so ``pay_1`` never matches inside ``pay_12``; only ids that exist in
the snapshot (or were created by the run) count, so a list of every id scores low precision.
Its ``passed`` (the ``result`` label of its metric) is ``score >= evidence_pass_at`` (0.5).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from grader.episodes.log import EpisodeLog
from grader.episodes.replay import CANCELLED, Replay
from grader.episodes.values import (
    ID_TOKEN,
    Bundle,
    EpisodeRecord,
    RecordRef,
    RootCause,
    SideEffect,
    StateCheck,
    StateLink,
)
from grader.toolcall.rules import Link, authority, call_links, same


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    passed: bool | None
    reason: str
    reason_code: str
    score: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": "episode",
            "passed": self.passed,
            "score": self.score,
            "reason": self.reason,
            "reason_code": self.reason_code,
        }


Verdict = tuple[bool | None, str]


def _state_check(check: StateCheck, run: Replay) -> Verdict:
    table = run.state[check.table]
    if check.id is None:
        if any(_matches(values, check.fields) for values in table.values()):
            return True, f"{check.text} exists"
        return False, f"no {check.text}"
    values = table.get(check.id)
    if check.absent:
        return (values is None), f"{check.text}" if values is None else f"{check.text}: present"
    if values is None:
        return False, f"{check.table} {check.id} does not exist"
    for name, want in check.fields:
        if name not in values or not same(values[name], want):
            return False, f"{check.table} {check.id}.{name} is not {want!r}"
    return True, f"{check.text} holds"


def _matches(values: Mapping[str, Any], fields: tuple[tuple[str, Any], ...]) -> bool:
    return all(name in values and same(values[name], want) for name, want in fields)


def _state_link(link: StateLink, run: Replay) -> Verdict:
    if link.target_id not in run.state[link.target_table]:
        return False, f"{link.text}: {link.target_table} {link.target_id} does not exist"
    for table, record_id in sorted(run.changed):
        values = run.state[table].get(record_id) if table == link.table else None
        if values is not None and same(values.get(link.field), link.target_id):
            return True, f"{link.text} holds ({table} {record_id})"
    return False, f"{link.text}: no record the run made or changed holds it"


def _side_effect(effect: SideEffect, run: Replay) -> Verdict:
    table = run.state[effect.table]
    if effect.effect == "created":
        made = [table[i] for t, i in run.created if t == effect.table and i in table]
        held = any(_matches(values, effect.match) for values in made)
        return held, f"{effect.table}: {'a' if held else 'no'} matching record created"
    assert effect.id is not None  # the record parser gives every other kind an id
    where = f"{effect.table} {effect.id}"
    if effect.effect == "deleted":
        return effect.id not in table, f"{where} {'deleted' if effect.id not in table else 'kept'}"
    if effect.effect == "unchanged":
        moved = (effect.table, effect.id) in run.changed
        return not moved, f"{where} {'changed' if moved else 'unchanged'}"
    status = table.get(effect.id, {}).get("status")
    return status == CANCELLED, f"{where} status is {status!r}"


def _all(verdicts: list[Verdict], ok: str) -> Verdict:
    """The first failing verdict, else the first error, else a pass."""
    for passed, reason in verdicts:
        if passed is False:
            return False, reason
    for passed, reason in verdicts:
        if passed is None:
            return None, reason
    return True, ok


def _links(
    links: tuple[Link | StateLink, ...], log: EpisodeLog, run: Replay, item: Mapping[str, Any]
) -> Verdict:
    verdicts: list[Verdict] = []
    for link in links:
        if isinstance(link, StateLink):
            verdicts.append(_state_link(link, run))
        else:
            passed, reason, _ = call_links((link,), log.events, item)
            verdicts.append((passed, reason))
    return _all(verdicts, f"{len(links)} link(s) hold")


def _bundle(bundle: Bundle, log: EpisodeLog, run: Replay, item: Mapping[str, Any]) -> Verdict:
    verdicts = [_state_check(c, run) for c in bundle.target_state]
    if bundle.links:
        verdicts.append(_links(bundle.links, log, run, item))
    verdicts += [_side_effect(e, run) for e in bundle.side_effects]
    return _all(verdicts, "holds")


def _normal(text: str) -> str:
    return " ".join(text.split()).casefold()


def _states(phrase: str, text: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(phrase)}(?!\w)", text) is not None


JUDGE_PENDING = "the judge form of root_cause needs a judge (gradeproxy replay --judge)"


def _cause(cause: RootCause, final: str | None) -> Verdict:
    if final is None:
        return False, "the episode has no final text answer"
    if cause.judge is not None:
        return None, JUDGE_PENDING  # judged by grade.judge_cause when a judge is given
    text = _normal(final)
    missing = [p for p in cause.all_of if not _states(p, text)]
    if missing:
        return False, f"the answer does not state {missing[0]!r}"
    if cause.any_of and not any(_states(p, text) for p in cause.any_of):
        return False, "the answer states none of the root-cause phrases"
    return True, "the answer states the root cause"


def cited_ids(text: str, known: frozenset[str]) -> set[str]:
    """Whole-token ids in ``text`` that are in ``known``."""
    return {token for token in ID_TOKEN.findall(text) if token in known}


def evidence_f1(final: str | None, evidence: tuple[str, ...], known: frozenset[str]) -> float:
    """F1 between cited known ids and the evidence ids (0 when nothing right is cited)."""
    cited = cited_ids(final or "", known)
    hits = len(cited & set(evidence))
    if not hits:
        return 0.0
    precision, recall = hits / len(cited), hits / len(evidence)
    return round(2 * precision * recall / (precision + recall), 6)


def _outcome(
    record: EpisodeRecord, log: EpisodeLog, run: Replay, item: Mapping[str, Any]
) -> tuple[Verdict, str | None]:
    assert record.expected_outcome is not None  # only called when configured
    bundles = [("expected_outcome", record.expected_outcome)] + [
        (f"accepted_alternatives[{i}]", b) for i, b in enumerate(record.accepted_alternatives)
    ]
    first: Verdict | None = None
    for name, bundle in bundles:
        passed, reason = _bundle(bundle, log, run, item)
        if passed:
            return (True, f"{name} holds"), name
        first = first or (passed, f"expected_outcome: {reason}")
    assert first is not None  # at least the expected outcome was judged
    return first, None


def columns(
    record: EpisodeRecord,
    log: EpisodeLog,
    run: Replay,
    role: str | None,
    item: Mapping[str, Any],
) -> tuple[list[Column], str | None]:
    """Every configured column, in row order, and the outcome bundle that matched."""
    out: list[Column] = []
    outcome_name: str | None = None
    outcome: Verdict | None = None
    if record.expected_outcome is not None:
        outcome, outcome_name = _outcome(record, log, run, item)
    if record.target_state is not None:
        passed, reason = _all([_state_check(c, run) for c in record.target_state], "holds")
        if not passed and outcome_name is not None and outcome_name != "expected_outcome":
            passed, reason = True, f"an accepted alternative holds ({outcome_name})"
        out.append(Column("end_state_ok", passed, reason, "state"))
    if record.forbidden_changes is not None:
        out.append(
            Column("no_forbidden_change", *_forbidden(record.forbidden_changes, run), "state")
        )
    if record.allowed_actions is not None:
        passed, reason, rule_code = authority(record.allowed_actions, log.events, role)
        code: str = rule_code
        if passed and run.problems:
            passed, reason, code = False, run.problems[0], "unresolved_call"
        out.append(Column("authority_ok", passed, reason, code))
    if record.required_links is not None:
        out.append(Column("links_ok", *_links(record.required_links, log, run, item), "links"))
    if record.side_effects is not None:
        verdict = _all([_side_effect(e, run) for e in record.side_effects], "side effects hold")
        out.append(Column("side_effects_ok", *verdict, "side_effects"))
    if outcome is not None:
        out.append(Column("outcome_ok", *outcome, "outcome"))
    if record.root_cause is not None:
        passed, reason = _cause(record.root_cause, log.final_text)
        code = "judge_unavailable" if reason == JUDGE_PENDING else "rule"
        out.append(Column("cause_correct", passed, reason, code))
    if record.evidence_ids is not None:
        known = record.snapshot_ids() | {i for _, i in run.created}
        if not known:
            known = frozenset(record.evidence_ids)
        score = evidence_f1(log.final_text, record.evidence_ids, known)
        passed = score >= record.evidence_pass_at
        reason = f"F1 {score:.3f} between cited ids and {len(record.evidence_ids)} evidence id(s)"
        out.append(Column("evidence_overlap", passed, reason, "evidence_f1", score))
    return out, outcome_name


def _forbidden(refs: tuple[RecordRef, ...], run: Replay) -> Verdict:
    for ref in refs:
        moved = sorted(
            i for t, i in run.changed if t == ref.table and (ref.id is None or i == ref.id)
        )
        if moved:
            return False, f"{ref.table} {moved[0]} changed"
    return True, f"{len(refs)} protected record(s) unchanged"
