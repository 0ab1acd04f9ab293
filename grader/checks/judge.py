"""The LLM judge: the client wrapper the judge checks share (``grader.checks.model_graded``).

Rules (seed 002, docs/grading.md "LLM judge"):

* **Pinned model.** A judge model id must name a snapshot: ``latest`` anywhere (``gpt-4o-latest``,
  ``llama3:latest``) is refused, and so is any id without a date (``2024-08-06``, ``20241022``),
  a four-digit snapshot (``-0125``, ``-2411``), a three-digit revision (``-002``), a ``-vN``
  version, or an ``@<commit or digest>`` revision. An alias moves to new weights under you and
  silently invalidates the calibration.
* **Temperature 0**, always; ``sampling_params.temperature`` other than 0 is refused.
* **Binary verdicts are strict.** The reply, stripped of surrounding whitespace, must be exactly
  ``PASS`` or ``FAIL`` — case-sensitive, as every label is: ``"pass"`` or ``"PASS."`` breaks the
  output contract the calibration measured, so it is a parse error, not a verdict. A parse
  error, a timeout or a transport error is retried up to ``retries`` times, then the row is left
  ungraded (``passed=None``): never coerced to a fail.
* **Different family.** When the judge and the graded model share a family (normalised
  prefixes: gpt/o-series, claude, llama, qwen, mistral, gemini, …), the result carries a
  ``warning``: a judge grading its own family is biased in a way calibration cannot remove.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from typing import Any, Literal, Protocol, TypeVar

from grader.errors import GraderError
from grader.lazy_pattern import LazyPattern
from grader.values import value_type

T = TypeVar("T")
JudgeFailure = Literal["judge_parse_error", "judge_timeout", "judge_error"]


class JudgeClient(Protocol):
    """Sends one chat completion to the judge model and returns the reply text.

    The proxy and the CLI plug in one aiohttp implementation, ``proxy.judge_client``. Raise on
    transport errors: the judge counts them as infrastructure errors.
    """

    async def complete(
        self, model: str, messages: list[dict[str, str]], temperature: float
    ) -> str: ...


JUDGE_PROMPT = """You are grading whether a response meets the following criterion: {criterion}

Examples of PASS:
{few_shot_pass_examples}

Examples of FAIL:
{few_shot_fail_examples}

Now grade this response. Output exactly one word, PASS or FAIL, with no other text.

Task: {task}
Response: {response}
Verdict:"""

_DATE = LazyPattern(r"(?<![0-9])20[0-9]{2}-?[01][0-9]-?[0-3][0-9](?![0-9])")
_SNAPSHOT = LazyPattern(r"(?:^|[-_@:])[0-9]{4}(?:$|[-_:])")
_REVISION = LazyPattern(r"-[0-9]{3}$|-v[0-9]+(?::[0-9]+)?$|@(?:sha256:)?[0-9a-f]{7,64}$")
_VENDOR_PREFIX = LazyPattern(r"^(?:[a-z]+\.)+")
_FAMILIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("gpt", ("gpt-", "gpt4", "gpt3", "chatgpt", "o1", "o3", "o4")),
    ("claude", ("claude",)),
    ("llama", ("llama", "meta-llama", "codellama")),
    ("qwen", ("qwen", "qwq")),
    ("mistral", ("mistral", "mixtral", "ministral", "codestral", "magistral", "devstral")),
    ("gemini", ("gemini",)),
    ("gemma", ("gemma",)),
    ("deepseek", ("deepseek",)),
    ("phi", ("phi-", "phi3", "phi4")),
    ("command", ("command",)),
    ("grok", ("grok",)),
)


def pinned_problem(model: str) -> str | None:
    """Why ``model`` is not a pinned snapshot id, or None when it is."""
    if not model.strip():
        return "is empty"
    if "latest" in re.split(r"[-_:@./ ]", model.lower()):
        return f"{model!r} is a 'latest' alias: it moves to new weights and voids the calibration"
    last = model.rsplit("/", 1)[-1]
    if _DATE().search(last) or _SNAPSHOT().search(last) or _REVISION().search(last):
        return None
    return (
        f"{model!r} is not pinned: name a dated snapshot (e.g. gpt-4o-2024-08-06), a version "
        "(-002, -v2) or a revision (name@<commit>)"
    )


def model_family(model: str | None) -> str | None:
    """The family a model id belongs to, by normalised prefix; None when unknown."""
    if not model:
        return None
    last = _VENDOR_PREFIX().sub("", model.lower().rsplit("/", 1)[-1])
    for family, prefixes in _FAMILIES:
        if last.startswith(prefixes):
            return family
    return None


def family_warning(judge_model: str, graded_model: str | None) -> str | None:
    family = model_family(judge_model)
    if family is None or family != model_family(graded_model):
        return None
    return (
        f"judge {judge_model!r} and graded model {graded_model!r} are both {family} models: "
        "a judge grading its own family is biased (seed 002: use a different family)"
    )


class JudgeParseError(GraderError, ValueError):
    """The judge replied with something other than the output contract allows."""


@value_type
class JudgeConfig:
    """Where and how to call the judge. The secret is named, never held: ``api_key_env``."""

    endpoint: str | None = None
    model: str | None = None  # default judge model for checks that name none
    api_key_env: str | None = None
    timeout_s: float = 30.0
    max_concurrency: int = 4
    retries: int = 2

    def __post_init__(self) -> None:
        if self.model is not None and (problem := pinned_problem(self.model)) is not None:
            raise ValueError(f"judge model {problem}")
        if not (self.timeout_s > 0 and self.max_concurrency >= 1 and self.retries >= 0):
            raise ValueError("judge timeout_s > 0, max_concurrency >= 1 and retries >= 0 needed")

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any]) -> JudgeConfig:
        """Build from a config file's ``judge`` section; unknown keys are refused."""
        allowed = {"endpoint", "model", "api_key_env", "timeout_s", "max_concurrency", "retries"}
        unknown = sorted(set(raw) - allowed)
        if unknown:
            raise ValueError(f"judge config: unknown key {unknown[0]!r} (known: {sorted(allowed)})")
        try:
            return cls(**dict(raw))
        except TypeError as exc:
            raise ValueError(f"judge config: {exc}") from None


@value_type
class JudgeAnswer:
    """What asking the judge produced: a parsed value, or why there is none."""

    value: Any
    failure: JudgeFailure | None  # None: ``value`` is the parsed reply
    error: str | None
    attempts: int
    # Every attempt in order (seed 003: a retry never overwrites the first): outcome, the reply
    # cut at REPLY_CAP characters (``reply_truncated``), latency, error. Stored in the column's
    # ``details.attempt_log``.
    log: tuple[dict[str, Any], ...] = ()


REPLY_CAP = 2000  # characters of a judge reply kept per attempt in the row


def _attempt(outcome: str, started: float, reply: str | None, error: str | None) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "outcome": outcome,
        "latency_s": round(time.perf_counter() - started, 6),
        "reply": None if reply is None else reply[:REPLY_CAP],
        "reply_truncated": reply is not None and len(reply) > REPLY_CAP,
    }
    if error is not None:
        entry["error"] = error[:REPLY_CAP]
    return entry


class Judge:
    """A judge client with its config: timeouts, retries and the concurrency limit."""

    def __init__(self, client: JudgeClient, config: JudgeConfig | None = None) -> None:
        self.client = client
        self.config = config or JudgeConfig()
        import asyncio  # imported here: asyncio is a good part of the command line's start-up

        self._slots = asyncio.Semaphore(self.config.max_concurrency)

    async def ask(
        self, model: str, messages: list[dict[str, str]], parse: Callable[[str], T]
    ) -> JudgeAnswer:
        """Ask until a reply parses, at most ``1 + retries`` times; never raises for a reply."""
        import asyncio

        code: JudgeFailure = "judge_error"
        error = "not attempted"
        attempts = 0
        log: list[dict[str, Any]] = []
        for attempts in range(1, self.config.retries + 2):
            started = time.perf_counter()
            try:
                async with self._slots, asyncio.timeout(self.config.timeout_s):
                    reply = await self.client.complete(model, messages, 0.0)
            except TimeoutError:
                code, error = "judge_timeout", f"no reply within {self.config.timeout_s:g}s"
                log.append(_attempt(code, started, None, error))
                continue
            except Exception as exc:  # any client failure is an infrastructure error
                code, error = "judge_error", f"{type(exc).__name__}: {exc}"
                log.append(_attempt(code, started, None, error))
                continue
            try:
                value = parse(reply)
            except JudgeParseError as exc:
                code, error = "judge_parse_error", str(exc)
                log.append(_attempt(code, started, reply, error))
                continue
            log.append(_attempt("ok", started, reply, None))
            return JudgeAnswer(value, None, None, attempts, tuple(log))
        return JudgeAnswer(None, code, error, attempts, tuple(log))


def as_judge(judge: Judge | JudgeClient | None) -> Judge | None:
    """Accept a bare client too (default config: its own concurrency limit per call site)."""
    if judge is None or isinstance(judge, Judge):
        return judge
    return Judge(judge)
