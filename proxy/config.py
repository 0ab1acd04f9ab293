"""The proxy's configuration: one YAML file, ``GRADEPROXY_*`` environment overrides, CLI flags.

Precedence, lowest first: defaults, the file, the environment, command-line flags. Unknown keys
are errors, and every error names the field (``upstream.url: must be an http(s) URL``,
``routes[1].shadow.sample_rate: must be within 0..1``), so a bad config fails at start and
never half-applies. Secrets appear only as environment variable *names* (``api_key_env``);
their values are read at start and never logged.

``routes`` and the ``shadow`` blocks are structured (a list, nested mappings) and come from the
file or from ``overrides`` only; ``GRADEPROXY_*`` variables override scalar fields.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_type_hints
from urllib.parse import urlsplit

import yaml

from grader.checks import JudgeConfig
from proxy._coerce import ConfigError, coerce, plain
from proxy._coerce import section as build_section

__all__ = ["Config", "ConfigError", "load_config"]

ENV_PREFIX = "GRADEPROXY_"


@dataclass(frozen=True, slots=True)
class Listen:
    host: str = "127.0.0.1"
    port: int = 8080


@dataclass(frozen=True, slots=True)
class Admin:
    port: int | None = None  # serve /metrics, /livez, /readyz on their own port
    host: str | None = None  # default: listen.host


@dataclass(frozen=True, slots=True)
class Shadow:
    """A candidate upstream that gets a copy of sampled graded requests (docs/shadow.md)."""

    url: str = ""
    api_key_env: str | None = None  # unset: no Authorization (the client's is never sent)
    model: str | None = None  # rewrite `model` in the shadow's copy of the request body
    sample_rate: float = 1.0  # of the requests that are graded (same sampling key)
    max_concurrency: int = 8  # shadow requests in flight at once; more are skipped, not queued
    timeout_s: float = 60.0  # the whole shadow exchange, read to its last byte
    stream: Literal["same", "never"] = "same"  # never: ask for a plain JSON body


@dataclass(frozen=True, slots=True)
class Upstream:
    url: str = ""
    api_key_env: str | None = None
    connect_timeout_s: float = 10.0
    idle_timeout_s: float = 300.0  # between two reads of the upstream body; no total timeout
    shadow: Shadow | None = None


@dataclass(frozen=True, slots=True)
class Route:
    """Requests whose body's ``model`` matches ``match`` (an fnmatch glob) go to ``url``."""

    match: str = ""
    url: str = ""
    api_key_env: str | None = None
    connect_timeout_s: float = 10.0
    idle_timeout_s: float = 300.0
    shadow: Shadow | None = None


@dataclass(frozen=True, slots=True)
class Tasks:
    path: Path | None = None
    watch: bool = False
    watch_interval_s: float = 2.0


@dataclass(frozen=True, slots=True)
class Grading:
    task_header: str = "X-Grade-Task"
    run_header: str = "X-Grade-Run"
    # The row's ``sample_id`` (joins live rows to offline ones and to run metadata).
    sample_id_header: str = "X-Grade-Sample-Id"
    meta_header_prefix: str = "X-Grade-Meta-"
    queue_size: int = 10000
    workers: int = 2
    sample_rate: float = 1.0
    # The sampling key of both grading and shadow sampling: this header (e.g. a conversation
    # id) when the request has it, else the request id.
    sampling_header: str | None = None
    inline_max_bytes: int = 16384  # larger responses are graded in a thread, off the event loop
    pair_max_pending: int = 10000  # shadow pairs waiting for their second leg
    pair_ttl_s: float = 900.0  # how long a pair waits for its second leg
    # Jobs waiting while none was taken off the queue for this long: grading is stuck.
    stuck_after_s: float = 30.0


@dataclass(frozen=True, slots=True)
class Results:
    path: Path | None = Path("results/grades.jsonl")
    max_bytes: int = 100 * 1024 * 1024
    backups: int = 5
    capture_answer: bool = True
    # The one cap on the answer a row stores (``truncated: true`` beyond it); grading reads all.
    max_answer_chars: int = 65536


@dataclass(frozen=True, slots=True)
class Limits:
    max_body_bytes: int = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Shutdown:
    drain_delay_s: float = 5.0
    grace_period_s: float = 60.0


@dataclass(frozen=True, slots=True)
class Metrics:
    models: tuple[str, ...] = ()  # allow-list of model label values; others become "other"
    max_models: int = 20  # without an allow-list: first N models seen, then "other"


@dataclass(frozen=True, slots=True)
class Logging:
    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["json", "console"] = "json"


@dataclass(frozen=True, slots=True)
class Judge:
    """The LLM judge for ``label_model``/``score_model`` checks (off the hot path, like all)."""

    endpoint: str | None = None  # an OpenAI-compatible base URL ending in /v1
    model: str | None = None  # pinned default for checks that name none (no `latest` aliases)
    api_key_env: str | None = None
    timeout_s: float = 30.0
    max_concurrency: int = 4
    retries: int = 2


@dataclass(frozen=True, slots=True)
class Scoring:
    """The scoring HTTP routes under /grading/v1 (docs/scoring.md); off by default."""

    enabled: bool = False
    max_batch: int = 1000


@dataclass(frozen=True, slots=True)
class Config:
    listen: Listen = field(default_factory=Listen)
    admin: Admin = field(default_factory=Admin)
    upstream: Upstream = field(default_factory=Upstream)
    routes: tuple[Route, ...] = ()
    tasks: Tasks = field(default_factory=Tasks)
    grading: Grading = field(default_factory=Grading)
    results: Results = field(default_factory=Results)
    limits: Limits = field(default_factory=Limits)
    shutdown: Shutdown = field(default_factory=Shutdown)
    metrics: Metrics = field(default_factory=Metrics)
    logging: Logging = field(default_factory=Logging)
    judge: Judge = field(default_factory=Judge)
    scoring: Scoring = field(default_factory=Scoring)

    def upstream_api_key(self) -> str | None:
        """The upstream key from the environment variable the config names, if any."""
        name = self.upstream.api_key_env
        return os.environ.get(name) if name else None

    def redacted(self) -> dict[str, Any]:
        """The effective config for the start-up log line: names of secrets, never values."""
        data: dict[str, Any] = plain(self)
        return data


def _check_url(where: str, value: str) -> None:
    url = urlsplit(value)
    if url.scheme not in ("http", "https") or not url.netloc:
        raise ConfigError(
            f"{where}: must be an http(s) URL such as http://127.0.0.1:8000/v1, got {value!r}"
        )


def _check_secret(where: str, name: str | None) -> None:
    if name and name not in os.environ:
        raise ConfigError(f"{where}: environment variable {name} is not set")


def _validate_shadow(where: str, shadow: Shadow | None) -> None:
    if shadow is None:
        return
    _check_url(f"{where}.url", shadow.url)
    checks = [
        (0.0 <= shadow.sample_rate <= 1.0, "sample_rate: must be within 0..1"),
        (shadow.max_concurrency >= 1, "max_concurrency: must be >= 1"),
        (shadow.timeout_s > 0, "timeout_s: must be > 0"),
        (shadow.model is None or shadow.model.strip() != "", "model: must not be empty"),
    ]
    for ok, message in checks:
        if not ok:
            raise ConfigError(f"{where}.{message}")
    _check_secret(f"{where}.api_key_env", shadow.api_key_env)


def _validate_routes(config: Config) -> None:
    _validate_shadow("upstream.shadow", config.upstream.shadow)
    for number, route in enumerate(config.routes):
        where = f"routes[{number}]"
        if not route.match.strip():
            raise ConfigError(f"{where}.match: must be a non-empty model name glob")
        _check_url(f"{where}.url", route.url)
        for name in ("connect_timeout_s", "idle_timeout_s"):
            if getattr(route, name) <= 0:
                raise ConfigError(f"{where}.{name}: must be > 0")
        _check_secret(f"{where}.api_key_env", route.api_key_env)
        _validate_shadow(f"{where}.shadow", route.shadow)


def _validate(config: Config) -> Config:
    _check_url("upstream.url", config.upstream.url)
    checks: list[tuple[bool, str]] = [
        (0 <= config.listen.port <= 65535, "listen.port: must be 0..65535"),
        (
            config.admin.port is None or 0 <= config.admin.port <= 65535,
            "admin.port: must be 0..65535",
        ),
        (config.upstream.connect_timeout_s > 0, "upstream.connect_timeout_s: must be > 0"),
        (config.upstream.idle_timeout_s > 0, "upstream.idle_timeout_s: must be > 0"),
        (config.grading.queue_size >= 1, "grading.queue_size: must be >= 1"),
        (config.grading.workers >= 1, "grading.workers: must be >= 1"),
        (0.0 <= config.grading.sample_rate <= 1.0, "grading.sample_rate: must be within 0..1"),
        (config.grading.task_header.strip() != "", "grading.task_header: must not be empty"),
        (config.results.max_bytes >= 1024, "results.max_bytes: must be >= 1024"),
        (config.results.backups >= 0, "results.backups: must be >= 0"),
        (config.limits.max_body_bytes >= 1024, "limits.max_body_bytes: must be >= 1024"),
        (config.shutdown.drain_delay_s >= 0, "shutdown.drain_delay_s: must be >= 0"),
        (config.shutdown.grace_period_s >= 0, "shutdown.grace_period_s: must be >= 0"),
        (config.metrics.max_models >= 1, "metrics.max_models: must be >= 1"),
        (config.tasks.watch_interval_s > 0, "tasks.watch_interval_s: must be > 0"),
        (config.grading.pair_max_pending >= 1, "grading.pair_max_pending: must be >= 1"),
        (config.grading.pair_ttl_s > 0, "grading.pair_ttl_s: must be > 0"),
        (config.grading.stuck_after_s > 0, "grading.stuck_after_s: must be > 0"),
        (config.results.max_answer_chars >= 0, "results.max_answer_chars: must be >= 0"),
    ]
    for ok, message in checks:
        if not ok:
            raise ConfigError(message)
    _check_secret("upstream.api_key_env", config.upstream.api_key_env)
    _validate_routes(config)
    _validate_judge(config.judge)
    if config.scoring.max_batch < 1:
        raise ConfigError("scoring.max_batch: must be >= 1")
    return config


def _validate_judge(judge: Judge) -> None:
    if judge.endpoint is not None:
        _check_url("judge.endpoint", judge.endpoint)
    _check_secret("judge.api_key_env", judge.api_key_env)
    try:
        JudgeConfig.from_mapping(
            {k: v for k, v in plain(judge).items() if k not in ("endpoint", "api_key_env")}
        )
    except ValueError as exc:
        raise ConfigError(f"judge: {exc}") from None


def _env_overrides(environ: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """``GRADEPROXY_UPSTREAM_URL=...`` -> ``{"upstream": {"url": ...}}``."""
    sections = _sections()
    out: dict[str, dict[str, Any]] = {}
    for key, value in environ.items():
        if not key.startswith(ENV_PREFIX):
            continue
        rest = key[len(ENV_PREFIX) :].lower()
        section = next((s for s in sections if rest.startswith(s + "_")), None)
        if section is None:
            continue  # not a config override (e.g. a secret the config names)
        out.setdefault(section, {})[rest[len(section) + 1 :]] = value
    return out


def _sections() -> set[str]:
    """Top-level fields that are mappings of fields (``routes``, a list, is not one)."""
    hints = get_type_hints(Config)
    return {f.name for f in dataclasses.fields(Config) if dataclasses.is_dataclass(hints[f.name])}


def load_config(
    path: Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Config:
    """Build and validate the effective config; raise :class:`ConfigError` naming the field."""
    data: dict[str, Any] = {}
    if path is not None:
        try:
            loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read config: {exc.strerror or exc}") from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not valid YAML: {exc}") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"{path}: the config must be a mapping of sections")
        data = dict(loaded or {})
    known = {f.name for f in dataclasses.fields(Config)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"{unknown[0]}: unknown section (known: {', '.join(sorted(known))})")
    from_text: dict[str, bool] = {}
    for section, values in _env_overrides(os.environ if environ is None else environ).items():
        merged = dict(data.get(section) or {})
        for key, text in values.items():
            merged[key] = text
            from_text[f"{section}.{key}"] = True
        data[section] = merged
    for section, given in (overrides or {}).items():
        if not isinstance(given, Mapping):  # `routes`: a list replaces the file's
            data[section] = given
            continue
        merged = dict(data.get(section) or {})
        merged.update({k: v for k, v in given.items() if v is not None})
        data[section] = merged
    hints = get_type_hints(Config)
    built = {
        name: build_section(name, hints[name], data.get(name), from_text)
        if name in _sections()
        else coerce(name, hints[name], [] if data.get(name) is None else data[name], False)
        for name in known
    }
    return _validate(Config(**built))
