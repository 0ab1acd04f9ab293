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
from typing import Any

from rapidfuzz import fuzz

from grader.checks._base import BaseCheck, CheckResult, Spec
from grader.checks.sample import CheckContext, Sample
from grader.checks.string_check import require_connected
from grader.checks.templates import Template, TemplateError, parse_template, unresolved
from grader.values import value_type

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
# Input caps where cost grows with size. Beyond them the column is an ``error``
# (``input_too_large``), never a score of a silently cut text, nor seconds of CPU: ROUGE-L is
# quadratic in tokens (a 40 KB pair cost 22 s of CPU before these caps).
MAX_CHARS = 200_000  # each side, every metric (fuzzy_match is C, BLEU linear in tokens)
MAX_LCS_CELLS = 1_000_000  # rouge_l: candidate tokens x reference tokens (~0.2 s at most)


def _too_large(metric: str, candidate: str, reference: str) -> str | None:
    """Why this pair is over the metric's cap, or None."""
    longest = max(len(candidate), len(reference))
    if longest > MAX_CHARS:
        return f"{metric}: input of {longest} characters is over the cap of {MAX_CHARS}"
    if metric == "rouge_l":
        cells = len(tokens(candidate)) * len(tokens(reference))
        if cells > MAX_LCS_CELLS:
            return (
                f"rouge_l: {cells} token pairs (candidate x reference) is over the cap of "
                f"{MAX_LCS_CELLS}"
            )
    return None


@value_type
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
            candidate = self.input.render(sample, item)
            reference = self.reference.render(sample, item)
        except TemplateError as exc:
            return unresolved(self, exc)
        too_large = _too_large(self.metric, candidate, reference)
        if too_large is not None:
            return self.result(None, too_large, "input_too_large", error=too_large)
        value = METRICS[self.metric](candidate, reference)
        passed = value >= self.threshold
        reason = f"{self.metric} {value:.4f} {'>=' if passed else '<'} {self.threshold:g}"
        return self.result(
            passed, reason, "above_threshold" if passed else "below_threshold", score=value
        )
