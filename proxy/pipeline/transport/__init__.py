"""Upstream transports: the seam the relay and the shadow runner send through, and the choice
of one per configured upstream.

``base`` is the interface (:class:`Transport`, :class:`Reply`), ``fast`` the proxy's own
HTTP/1.1 client with a per-origin cap, ``aio`` aiohttp's ``ClientSession``. Which one an
upstream uses is decided once at start, from ``client`` (the route's, else
``upstream.client``) and the environment: with ``upstream.trust_env``, an upstream that
``HTTP(S)_PROXY``/``NO_PROXY`` send through a forward proxy uses ``aiohttp`` whatever its
``client`` says, since the fast client speaks to origins only. Upstreams that agree on the
client, the ``tls`` block and the proxy share one transport (one connection pool).

It must never pick per request: the choice is made at start and logged with the config.
"""

from __future__ import annotations

import asyncio
import os
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from aiohttp import web
from yarl import URL

from proxy.config import Config, Tls
from proxy.config.model import ClientKind
from proxy.config.tls import DEFAULT_TLS, ssl_context
from proxy.pipeline.transport.aio import AiohttpReply, AiohttpTransport
from proxy.pipeline.transport.base import Reply, Transport
from proxy.pipeline.transport.fast import FastTransport
from proxy.pipeline.upstream import UpstreamPool

__all__ = [
    "TRANSPORTS",
    "AiohttpReply",
    "AiohttpTransport",
    "FastTransport",
    "Reply",
    "Transport",
    "Transports",
    "UpstreamSpec",
    "primary_specs",
    "proxied",
    "shadow_specs",
]


@dataclass(frozen=True, slots=True)
class UpstreamSpec:
    """One configured upstream, as far as its transport is concerned."""

    name: str  # the router's name for it: "upstream", "routes[0]", "routes[0].shadow"
    url: str
    client: ClientKind
    tls: Tls


def primary_specs(config: Config) -> list[UpstreamSpec]:
    up = config.upstream
    specs = [UpstreamSpec("upstream", up.url, up.client, up.tls)]
    for number, route in enumerate(config.routes):
        specs.append(
            UpstreamSpec(f"routes[{number}]", route.url, route.client or up.client, route.tls)
        )
    return specs


def shadow_specs(config: Config) -> list[UpstreamSpec]:
    up = config.upstream
    blocks = [("upstream.shadow", up.shadow)]
    blocks += [(f"routes[{n}].shadow", route.shadow) for n, route in enumerate(config.routes)]
    return [
        UpstreamSpec(name, shadow.url, shadow.client or up.client, shadow.tls)
        for name, shadow in blocks
        if shadow is not None
    ]


def proxied(url: str, environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``HTTP(S)_PROXY``/``NO_PROXY`` send a request to ``url`` through a proxy: the
    variables read as the standard library reads them (lower case wins), ``NO_PROXY`` by its
    ``proxy_bypass_environment``, the reading aiohttp's ``trust_env`` uses too."""
    env = os.environ if environ is None else environ
    proxies: dict[str, str] = {}
    for lower in (False, True):  # the upper-case names first, so the lower-case ones win
        for name, value in env.items():
            if value and name[-6:].lower() == "_proxy" and (name == name.lower()) == lower:
                proxies[name[:-6].lower()] = value
    parsed = URL(url)
    if parsed.scheme not in proxies or parsed.raw_host is None:
        return False
    host = parsed.raw_host if parsed.explicit_port is None else f"{parsed.raw_host}:{parsed.port}"
    # Public in urllib.request, missing from typeshed's stubs.
    return not urllib.request.proxy_bypass_environment(host, proxies)  # type: ignore[attr-defined]


class Transports:
    """The transports of a set of upstreams, by upstream name, with the idle scans their fast
    pools need; built inside a running loop (the pools and sessions belong to it)."""

    def __init__(
        self,
        specs: list[UpstreamSpec],
        shortest_idle_s: float,
        trust_env: bool = False,
        max_per_origin: int = 0,
        waited: Callable[[], None] = lambda: None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.default_pool = UpstreamPool(shortest_idle_s)
        self.chosen: dict[str, str] = {}  # upstream name -> "fast" / "aiohttp" / "aiohttp (proxy)"
        self._by_name: dict[str, Transport] = {}
        shared: dict[tuple[str, Tls, bool], Transport] = {}
        self._pools: list[UpstreamPool] = [self.default_pool]
        for spec in specs:
            via_proxy = trust_env and proxied(spec.url, environ)
            kind: ClientKind = "aiohttp" if via_proxy else spec.client
            key = (kind, spec.tls, via_proxy)
            transport = shared.get(key)
            if transport is None:
                tls = ssl_context(f"{spec.name}.tls", spec.tls)
                if kind == "aiohttp":
                    transport = AiohttpTransport(tls, trust_env, max_per_origin)
                else:
                    pool = self.default_pool
                    if spec.tls != DEFAULT_TLS:
                        pool = UpstreamPool(shortest_idle_s, tls=tls)
                        self._pools.append(pool)
                    transport = FastTransport(pool, max_per_origin, waited)
                shared[key] = transport
            self._by_name[spec.name] = transport
            self.chosen[spec.name] = kind + (" (proxy)" if via_proxy else "")
        self._transports = list(shared.values())
        self._scans: list[asyncio.Task[None]] = []

    def __getitem__(self, name: str) -> Transport:
        return self._by_name[name]

    def start(self) -> None:
        """Start the idle-read scans of the fast pools."""
        self._scans = [
            asyncio.create_task(pool.run(), name=f"upstream-idle-watch-{n}")
            for n, pool in enumerate(self._pools)
        ]

    async def aclose(self) -> None:
        for scan in self._scans:
            scan.cancel()
        for scan in self._scans:
            await scan
        self.default_pool.close()
        for transport in self._transports:
            await transport.aclose()


TRANSPORTS = web.AppKey("upstream_transports", Transports)
"""The primary upstreams' transports, by upstream name (proxy/pipeline/transport/)."""
