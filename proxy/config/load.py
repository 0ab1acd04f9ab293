"""Loading the config: the file, ``GRADEPROXY_*`` overrides, then validation across sections.

The sections themselves are plain frozen dataclasses (``proxy.config.model``); everything that
reads a file, the environment or checks one section against another lives here, so the model
stays a description of what can be configured.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.util
import os
import re
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any, get_type_hints
from urllib.parse import urlsplit

import yaml

from grader.capture import AnswerMode
from grader.checks import JudgeConfig
from proxy.config.coerce import ConfigError, coerce, plain
from proxy.config.coerce import section as build_section
from proxy.config.model import ENV_PREFIX, Config, Judge, Results, Shadow
from proxy.config.tls import ssl_context
from proxy.config.tracing import tracing_problems
from proxy.config.urls import check_base_url
from proxy.config.yamlpos import field_line, yaml_error_line

_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # an HTTP field name (RFC 9110 token)


def _check_secret(where: str, name: str | None) -> None:
    if name and name not in os.environ:
        raise ConfigError(f"{where}: environment variable {name} is not set")


def _validate_sink(results: Results) -> None:
    """``results.sink`` and its settings (proxy/pipeline/record/sinks/): a PostgreSQL URL that
    holds no password (a URL is logged and shown; the secret comes from an env var or file)."""
    if results.sink is None:
        return
    parts = urlsplit(results.sink)
    checks = [
        (parts.scheme in ("postgresql", "postgres"), "results.sink: must be a postgresql:// URL"),
        (
            parts.password is None,
            "results.sink: must not hold a password: set results.sink_password_env or "
            "results.sink_password_file",
        ),
        (
            results.sink_password_env is None or results.sink_password_file is None,
            "results.sink_password_env, results.sink_password_file: give one, not both",
        ),
        (results.sink_batch_rows >= 1, "results.sink_batch_rows: must be >= 1"),
        (results.sink_buffer_bytes >= 65536, "results.sink_buffer_bytes: must be >= 65536"),
        (results.sink_retry_s > 0, "results.sink_retry_s: must be > 0"),
        (results.sink_timeout_s >= 1, "results.sink_timeout_s: must be >= 1"),
    ]
    for ok, message in checks:
        if not ok:
            raise ConfigError(message)
    if importlib.util.find_spec("psycopg") is None:
        raise ConfigError("results.sink: needs psycopg: pip install 'gradeproxy[postgres]'")
    _check_secret("results.sink_password_env", results.sink_password_env)
    if results.sink_password_file is not None and not results.sink_password_file.is_file():
        raise ConfigError(f"results.sink_password_file: {results.sink_password_file}: no such file")


def _validate_shadow(where: str, shadow: Shadow | None) -> None:
    if shadow is None:
        return
    check_base_url(f"{where}.url", shadow.url)
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
    ssl_context(f"{where}.tls", shadow.tls)


def _validate_routes(config: Config) -> None:
    _validate_shadow("upstream.shadow", config.upstream.shadow)
    for number, route in enumerate(config.routes):
        where = f"routes[{number}]"
        if not route.match.strip():
            raise ConfigError(f"{where}.match: must be a non-empty model name glob")
        check_base_url(f"{where}.url", route.url)
        for name in ("connect_timeout_s", "idle_timeout_s"):
            if getattr(route, name) <= 0:
                raise ConfigError(f"{where}.{name}: must be > 0")
        _check_secret(f"{where}.api_key_env", route.api_key_env)
        ssl_context(f"{where}.tls", route.tls)
        _validate_shadow(f"{where}.shadow", route.shadow)


def _validate(config: Config) -> Config:
    check_base_url("upstream.url", config.upstream.url)
    checks: list[tuple[bool, str]] = [
        (0 <= config.listen.port <= 65535, "listen.port: must be 0..65535"),
        (1 <= config.listen.workers <= 256, "listen.workers: must be within 1..256"),
        (
            config.listen.workers == 1 or bool(config.admin.port),
            "listen.workers: more than 1 needs a fixed admin.port (worker i serves /metrics and"
            " /ui on admin.port + i; a scrape of the shared port would reach a random worker)",
        ),
        (
            config.admin.port is None or 0 <= config.admin.port <= 65535,
            "admin.port: must be 0..65535",
        ),
        (
            config.admin.port is None or config.admin.port + config.listen.workers - 1 <= 65535,
            "admin.port: admin.port + listen.workers - 1 must be <= 65535",
        ),
        (
            config.listen.workers == 1
            or not config.admin.port
            or not config.admin.port
            <= config.listen.port
            < config.admin.port + config.listen.workers,
            "listen.port: must not be one of the workers' admin ports (admin.port + i)",
        ),
        (config.upstream.connect_timeout_s > 0, "upstream.connect_timeout_s: must be > 0"),
        (config.upstream.idle_timeout_s > 0, "upstream.idle_timeout_s: must be > 0"),
        (
            config.upstream.max_connections_per_origin >= 0,
            "upstream.max_connections_per_origin: must be >= 0 (0: no cap)",
        ),
        (config.grading.queue_size >= 1, "grading.queue_size: must be >= 1"),
        (config.grading.workers >= 1, "grading.workers: must be >= 1"),
        (0.0 <= config.grading.sample_rate <= 1.0, "grading.sample_rate: must be within 0..1"),
        (config.grading.task_header.strip() != "", "grading.task_header: must not be empty"),
        (config.results.max_bytes >= 1024, "results.max_bytes: must be >= 1024"),
        (config.results.backups >= 0, "results.backups: must be >= 0"),
        (config.limits.max_body_bytes >= 1024, "limits.max_body_bytes: must be >= 1024"),
        (config.limits.max_capture_bytes >= 1024, "limits.max_capture_bytes: must be >= 1024"),
        (config.client.header_timeout_s > 0, "client.header_timeout_s: must be > 0"),
        (config.client.body_timeout_s > 0, "client.body_timeout_s: must be > 0"),
        (config.client.idle_timeout_s > 0, "client.idle_timeout_s: must be > 0"),
        (
            not config.scoring.on_admin_port or config.admin.port is not None,
            "scoring.on_admin_port: needs admin.port",
        ),
        (config.shutdown.drain_delay_s >= 0, "shutdown.drain_delay_s: must be >= 0"),
        (config.shutdown.grace_period_s >= 0, "shutdown.grace_period_s: must be >= 0"),
        (config.metrics.max_models >= 1, "metrics.max_models: must be >= 1"),
        (config.metrics.max_keys >= 1, "metrics.max_keys: must be >= 1"),
        (config.tasks.watch_interval_s > 0, "tasks.watch_interval_s: must be > 0"),
        (config.grading.pair_max_pending >= 1, "grading.pair_max_pending: must be >= 1"),
        (config.grading.pair_ttl_s > 0, "grading.pair_ttl_s: must be > 0"),
        (config.grading.stuck_after_s > 0, "grading.stuck_after_s: must be > 0"),
        (config.grading.job_deadline_s > 0, "grading.job_deadline_s: must be > 0"),
        (
            0 <= config.grading.batch_window_s <= 1,
            "grading.batch_window_s: must be within 0..1",
        ),
        (config.grading.episode_max_turns >= 1, "grading.episode_max_turns: must be >= 1"),
        (config.grading.episode_max_calls >= 1, "grading.episode_max_calls: must be >= 1"),
        (config.grading.episode_max_bytes >= 1024, "grading.episode_max_bytes: must be >= 1024"),
        (config.results.max_answer_chars >= 0, "results.max_answer_chars: must be >= 0"),
        (
            0.0 <= config.results.capture_untagged <= 1.0,
            "results.capture_untagged: must be within 0..1",
        ),
        (
            0 <= config.ui.failure_ring_size <= 10000,
            "ui.failure_ring_size: must be within 0..10000",
        ),
        (0 <= config.review.judged_sample <= 1, "review.judged_sample: must be within 0..1"),
        (config.review.max_items >= 1, "review.max_items: must be >= 1"),
    ]
    for ok, message in checks:
        if not ok:
            raise ConfigError(message)
    for name in config.upstream.strip_client_credentials:
        if not _TOKEN.fullmatch(name):
            raise ConfigError(f"upstream.strip_client_credentials: not a header name: {name!r}")
    _validate_sink(config.results)
    _check_secret("upstream.api_key_env", config.upstream.api_key_env)
    ssl_context("upstream.tls", config.upstream.tls)
    config.inbound_keys()  # every secret readable, ids unique (proxy/config/keys.py)
    _validate_routes(config)
    _validate_judge(config.judge)
    if config.scoring.max_batch < 1:
        raise ConfigError("scoring.max_batch: must be >= 1")
    if problems := tracing_problems(config.tracing):
        raise ConfigError(problems[0])
    return config


def _validate_judge(judge: Judge) -> None:
    if judge.endpoint is not None:
        check_base_url("judge.endpoint", judge.endpoint)
    _check_secret("judge.api_key_env", judge.api_key_env)
    try:
        JudgeConfig.from_mapping(
            {
                k: v
                for k, v in plain(judge).items()
                if k not in ("endpoint", "api_key_env", "allow_non_v1_path")
            }
        )
    except ValueError as exc:
        raise ConfigError(f"judge: {exc}") from None


def _env_overrides(
    environ: Mapping[str, str], origins: dict[str, str]
) -> dict[str, dict[str, Any]]:
    """``GRADEPROXY_UPSTREAM_URL=...`` -> ``{"upstream": {"url": ...}}``; ``origins`` records
    ``upstream.url`` -> the variable's name, so an error can say where the value came from."""
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
        origins[f"{section}.{rest[len(section) + 1 :]}"] = f"environment variable {key}"
    return out


def _sections() -> set[str]:
    """Top-level fields that are mappings of fields (``routes``, a list, is not one)."""
    hints = get_type_hints(Config)
    return {f.name for f in dataclasses.fields(Config) if dataclasses.is_dataclass(hints[f.name])}


def load_config(
    path: Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    flags: Mapping[str, str] | None = None,
) -> Config:
    """Build and validate the effective config; raise :class:`ConfigError` naming the field,
    and the environment variable or flag (``flags``: ``listen.port`` -> ``--port``) that set it.
    """
    origins: dict[str, str] = {}
    try:
        return _load(path, overrides, os.environ if environ is None else environ, origins, flags)
    except ConfigError as exc:
        where = str(exc).split(": ", 1)[0]
        if where in origins:
            raise ConfigError(f"{exc} (from {origins[where]})") from None
        raise


def _load(
    path: Path | None,
    overrides: Mapping[str, Any] | None,
    environ: Mapping[str, str],
    origins: dict[str, str],
    flags: Mapping[str, str] | None,
) -> Config:
    data: dict[str, Any] = {}
    text = ""
    if path is not None:
        try:
            text = path.read_text(encoding="utf-8")
            loaded = yaml.safe_load(text)
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read config: {exc.strerror or exc}") from None
        except yaml.YAMLError as exc:
            line, problem = yaml_error_line(exc)
            where = f"{path}:{line}" if line else str(path)
            raise ConfigError(f"{where}: not valid YAML: {problem}") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"{path}: the config must be a mapping of sections")
        data = dict(loaded or {})
    try:
        return _build(data, overrides, environ, origins, flags)
    except ConfigError as exc:
        field = str(exc).split(":", 1)[0]  # the message starts with the field
        if path is None or field in origins:  # set by a variable or a flag, not by the file
            raise
        line = field_line(text, field)
        raise ConfigError(f"{path}:{line}: {exc}" if line else f"{path}: {exc}") from None


def _build(
    data: dict[str, Any],
    overrides: Mapping[str, Any] | None,
    environ: Mapping[str, str],
    origins: dict[str, str],
    flags: Mapping[str, str] | None,
) -> Config:
    known = {f.name for f in dataclasses.fields(Config)}
    unknown = sorted(set(data) - known)
    if unknown:
        close = difflib.get_close_matches(unknown[0], sorted(known), n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise ConfigError(
            f"{unknown[0]}: unknown section (known: {', '.join(sorted(known))}){hint}"
        )
    from_text: dict[str, bool] = {}
    for section, values in _env_overrides(environ, origins).items():
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
        for key, value in given.items():
            if value is not None and flags and f"{section}.{key}" in flags:
                origins[f"{section}.{key}"] = f"flag {flags[f'{section}.{key}']}"
    answer_given = (data.get("results") or {}).get("answer") is not None
    hints = get_type_hints(Config)
    built = {
        name: build_section(name, hints[name], data.get(name), from_text)
        if name in _sections()
        else coerce(name, hints[name], [] if data.get(name) is None else data[name], False)
        for name in known
    }
    built["results"] = _answer_alias(built["results"], answer_given)
    return _validate(Config(**built))


def _answer_alias(results: Results, answer_given: bool) -> Results:
    """``results.capture_answer``, the deprecated alias, resolved into ``results.answer``
    (true: keep, false: drop) with a warning; both given is an error, not a guess."""
    if results.capture_answer is None:
        return results
    if answer_given:
        raise ConfigError(
            "results.capture_answer: give results.answer or its deprecated alias "
            "results.capture_answer, not both"
        )
    answer: AnswerMode = "keep" if results.capture_answer else "drop"
    warnings.warn(
        f"results.capture_answer is deprecated: write 'results.answer: {answer}' instead",
        FutureWarning,
        stacklevel=2,
    )
    return dataclasses.replace(results, answer=answer)
