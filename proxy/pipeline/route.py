"""Which upstream a request goes to, and which shadow (if any) gets a copy of it.

``routes`` map a request to an upstream by its body's ``model`` (an fnmatch glob, first match
wins); ``upstream`` is the default. Everything is resolved once at start: API keys are read from
their environment variables, URLs become the upstream client's ``Origin`` and timeouts its
``Timeouts`` (proxy/pipeline/upstream/), and each shadow gets its concurrency limiter. With
no routes, :meth:`Router.pick` never looks at the body, so the common case parses no JSON on
the hot path.

It must never alter the body it reads: the model is parsed from a copy.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

import orjson

from proxy.config import Config, Shadow
from proxy.pipeline.upstream import Origin, Timeouts


class Slots:
    """A semaphore that is only ever tried, never waited on: a full one means "skip".

    ``asyncio.Semaphore`` has no try-acquire, and a shadow copy must never wait for a slot
    (waiting would either delay the primary or queue unboundedly).
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    def try_acquire(self) -> bool:
        if self.used >= self.limit:
            return False
        self.used += 1
        return True

    def release(self) -> None:
        self.used -= 1


@dataclass(frozen=True, slots=True)
class ShadowTarget:
    """A resolved ``shadow`` block."""

    name: str  # where it is configured: "upstream.shadow", "routes[0].shadow"
    url: str
    api_key: str | None
    model: str | None
    sample_rate: float
    timeout_s: float
    stream: Literal["same", "never"]
    slots: Slots
    origin: Origin = field(init=False)  # the url parsed once, for the upstream client

    def __post_init__(self) -> None:
        object.__setattr__(self, "origin", Origin.of(self.url))


@dataclass(frozen=True, slots=True)
class Target:
    """A resolved upstream: the default one or a route's."""

    name: str  # "upstream", "routes[0]", ...
    url: str
    api_key: str | None
    timeouts: Timeouts
    shadow: ShadowTarget | None
    origin: Origin = field(init=False)  # the url parsed once, for the upstream client

    def __post_init__(self) -> None:
        object.__setattr__(self, "origin", Origin.of(self.url))


def request_model(body: bytes) -> str | None:
    """The request body's ``model``, if the body is a JSON object that has a string one."""
    if body[:64].lstrip()[:1] != b"{":
        return None  # not a JSON object (multipart uploads, empty bodies): no parse
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    model = payload.get("model") if isinstance(payload, dict) else None
    return model if isinstance(model, str) else None


def _key(name: str | None, environ: Mapping[str, str]) -> str | None:
    return environ.get(name) if name else None


def _shadow(name: str, shadow: Shadow | None, environ: Mapping[str, str]) -> ShadowTarget | None:
    if shadow is None:
        return None
    return ShadowTarget(
        name=name,
        url=shadow.url,
        api_key=_key(shadow.api_key_env, environ),
        model=shadow.model,
        sample_rate=shadow.sample_rate,
        timeout_s=shadow.timeout_s,
        stream=shadow.stream,
        slots=Slots(shadow.max_concurrency),
    )


def _timeout(connect_s: float, idle_s: float) -> Timeouts:
    # No total: a stream may legitimately last minutes; idle_s bounds the silence instead.
    return Timeouts(connect_s, idle_s)


class Router:
    """Picks the :class:`Target` for a request body."""

    def __init__(self, config: Config, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        up = config.upstream
        self.default = Target(
            "upstream",
            up.url,
            _key(up.api_key_env, env),
            _timeout(up.connect_timeout_s, up.idle_timeout_s),
            _shadow("upstream.shadow", up.shadow, env),
        )
        self.routes: list[tuple[re.Pattern[str], Target]] = []
        for number, route in enumerate(config.routes):
            name = f"routes[{number}]"
            target = Target(
                name,
                route.url,
                _key(route.api_key_env, env),
                _timeout(route.connect_timeout_s, route.idle_timeout_s),
                _shadow(f"{name}.shadow", route.shadow, env),
            )
            # fnmatch.translate + re: fnmatchcase semantics, compiled once.
            self.routes.append((re.compile(fnmatch.translate(route.match)), target))

    @property
    def has_shadows(self) -> bool:
        return self.default.shadow is not None or any(t.shadow for _, t in self.routes)

    def pick(self, body: bytes) -> Target:
        """The first route whose glob matches the body's model, else the default upstream."""
        if not self.routes:
            return self.default
        model = request_model(body)
        if model is None:
            return self.default
        for pattern, target in self.routes:
            if pattern.match(model):
                return target
        return self.default
