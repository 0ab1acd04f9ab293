"""``text_similarity``: OpenAI's similarity grader, for the metrics we can compute exactly.

``{"type": "text_similarity", "name", "input", "reference", "evaluation_metric",
"pass_threshold"}``; the result carries the metric as ``score`` (0..1) and passes when
``score >= pass_threshold``.

Metrics (pure Python, each small enough to check by hand):

* ``fuzzy_match`` — rapidfuzz ``fuzz.ratio / 100``: the normalised InDel similarity
  ``1 - (insertions + deletions) / (len(a) + len(b))``, case-sensitive, on the raw strings;
* ``bleu`` — sentence BLEU-4: clipped n-gram precisions for n = 1..4, geometric mean, times
  the brevity penalty ``exp(1 - r/c)`` when the candidate is shorter. Precisions for n ≥ 2 are
  add-one smoothed (Lin & Och 2004), so short answers are not zeroed by a missing 4-gram; an
  answer with no matching word scores 0;
* ``rouge_l`` — ROUGE-L F1: ``2PR / (P + R)`` over the longest common token subsequence.

BLEU and ROUGE tokenise with ``\\w+`` after Unicode case folding (punctuation is dropped).
Two empty texts score 1; one empty text scores 0. Other OpenAI metrics (``gleu``, ``meteor``,
``cosine``, ``rouge_1``…``rouge_5``) are refused at load rather than approximated.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rapidfuzz import fuzz

from grader.checks._base import BaseCheck, CheckContext, CheckResult, Sample, Spec
from grader.checks.string_check import require_connected
from grader.checks.templates import Template, TemplateError, parse_template, unresolved

_TOKEN = re.compile(r"\w+")
BLEU_MAX_N = 4


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(text.casefold())


def fuzzy_match(candidate: str, reference: str) -> float:
    return float(fuzz.ratio(candidate, reference)) / 100.0


def _ngrams(words: Sequence[str], n: int) -> Counter[tuple[str, ...]]:
    return Counter(tuple(words[i : i + n]) for i in range(len(words) - n + 1))


def bleu(candidate: str, reference: str) -> float:
    cand, ref = tokens(candidate), tokens(reference)
    if not cand or not ref:
        return 1.0 if not cand and not ref else 0.0
    log_sum = 0.0
    for n in range(1, BLEU_MAX_N + 1):
        cand_grams, ref_grams = _ngrams(cand, n), _ngrams(ref, n)
        matched = sum(min(count, ref_grams[gram]) for gram, count in cand_grams.items())
        total = sum(cand_grams.values())
        if n == 1:
            if matched == 0:
                return 0.0
            log_sum += math.log(matched / total)
        else:
            log_sum += math.log((matched + 1) / (total + 1))
    brevity = 1.0 if len(cand) >= len(ref) else math.exp(1 - len(ref) / len(cand))
    return brevity * math.exp(log_sum / BLEU_MAX_N)


def _lcs_length(a: Sequence[str], b: Sequence[str]) -> int:
    previous = [0] * (len(b) + 1)
    for x in a:
        current = [0]
        for j, y in enumerate(b, start=1):
            current.append(previous[j - 1] + 1 if x == y else max(previous[j], current[j - 1]))
        previous = current
    return previous[-1]


def rouge_l(candidate: str, reference: str) -> float:
    cand, ref = tokens(candidate), tokens(reference)
    if not cand or not ref:
        return 1.0 if not cand and not ref else 0.0
    common = _lcs_length(cand, ref)
    if common == 0:
        return 0.0
    precision, recall = common / len(cand), common / len(ref)
    return 2 * precision * recall / (precision + recall)


METRICS: dict[str, Callable[[str, str], float]] = {
    "fuzzy_match": fuzzy_match,
    "bleu": bleu,
    "rouge_l": rouge_l,
}
_OPENAI_ONLY = {"gleu", "meteor", "cosine", "rouge_1", "rouge_2", "rouge_3", "rouge_4", "rouge_5"}
# BLEU and ROUGE-L are quadratic or worse in tokens at worst; long answers are cut, not graded
# slowly on the proxy's grading workers.
MAX_CHARS = 20_000


@dataclass(frozen=True, slots=True)
class SimilarityCheck(BaseCheck):
    metric: str
    threshold: float
    input: Template
    reference: Template

    @classmethod
    def build(cls, definition: Mapping[str, Any], where: str) -> SimilarityCheck:
        spec = Spec(
            definition,
            where,
            frozenset({"input", "reference", "evaluation_metric", "pass_threshold"}),
        )
        metric = definition.get("evaluation_metric")
        if metric not in METRICS:
            supported = ", ".join(METRICS)
            why = (
                "is an OpenAI metric gradeproxy does not implement"
                if metric in _OPENAI_ONLY
                else "is not a known metric"
            )
            raise spec.error("evaluation_metric", f"{metric!r} {why}; supported: {supported}")
        threshold = spec.number("pass_threshold")
        if not 0.0 <= threshold <= 1.0:
            raise spec.error("pass_threshold", "must be between 0 and 1")
        input_t = parse_template(spec.str_("input"), spec.where)
        reference_t = parse_template(spec.str_("reference"), spec.where)
        require_connected(spec, input_t, reference_t)
        return cls(
            spec.name,
            "text_similarity",
            spec.digest(),
            str(metric),
            threshold,
            input_t,
            reference_t,
        )

    @property
    def templates(self) -> tuple[Template, ...]:
        return (self.input, self.reference)

    def run(self, sample: Sample, item: Mapping[str, Any], context: CheckContext) -> CheckResult:
        try:
            candidate = self.input.render(sample, item)[:MAX_CHARS]
            reference = self.reference.render(sample, item)[:MAX_CHARS]
        except TemplateError as exc:
            return unresolved(self, exc)
        value = METRICS[self.metric](candidate, reference)
        passed = value >= self.threshold
        reason = f"{self.metric} {value:.4f} {'>=' if passed else '<'} {self.threshold:g}"
        return self.result(
            passed, reason, "above_threshold" if passed else "below_threshold", score=value
        )
