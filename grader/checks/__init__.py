"""Checks: the columns a task grades an answer on (docs/checks-contract.md, docs/grading.md).

Pure like the rest of ``grader``: no aiohttp and no network I/O except through a
:class:`JudgeClient` the caller supplies (the proxy's and the CLI's is ``proxy.judge_client``;
``lint-imports`` enforces the rule in CI). Layout, one check family a module::

    _base.py         CheckResult, the Check protocol, BaseCheck, Spec
    sample.py        Sample (the answer as templates name it), its calls, CheckContext
    templates.py     {{ sample.* }} / {{ item.* }} templates
    string_check.py  OpenAI string_check (eq, ne, like, ilike)
    similarity.py    OpenAI text_similarity (fuzzy_match, bleu, rouge_l)
    tool_call.py     grading.md's tool-call grader, plus acceptable/optional/parallel/no-call
    call_match.py    one expected call vs one answer call: paths, string modes, strict numbers
    call_sets.py     answer calls parsed once, paired one to one (maximum matching)
    json_schema.py   arguments against a schema, or the request's own tool schema
    policy.py        seed 001's action record: authority, forbidden calls, links
    multi.py         OpenAI multi: sub-checks and a safe arithmetic formula
    judge.py         the JudgeClient protocol and the judge wrapper: pinning, retries,
                     timeouts, concurrency, family warning (below _base: a check holds a judge)
    model_graded.py  OpenAI label_model / score_model and our binary criterion form
    _schema.py       the one safe JSON Schema validator (no fetch, RE2 patterns)
    build.py         definitions to checks, the pass rule

Running a task's checks on an answer is the engine's job (``grader.engine``): nothing in this
package imports ``grader.tasks``, the engine or the episodes. Fixture mutation, which runs the
engine, sits above it (``grader/mutation.py``); the call-link rule ``policy`` shares with the
episodes sits below both (``grader/toolcall/rules.py``).
"""

from grader.checks._base import (
    CHECK_REASON_CODES,
    Check,
    CheckDefinitionError,
    CheckReasonCode,
    CheckResult,
    JudgeClient,
    check_digest,
)
from grader.checks.build import build_check, build_checks, columns_of
from grader.checks.judge import Judge, JudgeConfig, model_family, pinned_problem
from grader.checks.sample import CheckContext, Sample

__all__ = [
    "CHECK_REASON_CODES",
    "Check",
    "CheckContext",
    "CheckDefinitionError",
    "CheckReasonCode",
    "CheckResult",
    "Judge",
    "JudgeClient",
    "JudgeConfig",
    "Sample",
    "build_check",
    "build_checks",
    "check_digest",
    "columns_of",
    "model_family",
    "pinned_problem",
]
