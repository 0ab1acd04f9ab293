"""The price table (``pricing.path``): what a response's reported tokens cost, never a guess.

A YAML file of per-model prices per million tokens (config/pricing/example.yaml)::

    models:
      gpt-4.1-mini: {input: 0.40, output: 1.60, cached_input: 0.10}

A model is priced by its exact name, else by that name without a trailing snapshot date
(``gpt-4.1-mini-2025-04-14`` → ``gpt-4.1-mini``); any other model has no price, and its cost is
``None`` (the proxy counts it as unknown), never a neighbour's. Cached input tokens are part of
the input tokens: they are charged at ``cached_input`` (at ``input`` when the table gives no
``cached_input``), the rest of the input at ``input``; reasoning tokens are part of the output
tokens and charged as output. A response without a reported input or output count has no cost.

Pure: reading the file is the only I/O; a bad file raises :class:`PriceTableError` naming it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

from grader.errors import GraderError

__all__ = ["ModelPrice", "PriceTable", "PriceTableError", "load_prices", "parse_prices"]

_SNAPSHOT: Final = re.compile(r"-\d{4}-\d{2}-\d{2}$")
_KINDS: Final = ("input", "output", "cached_input")


class PriceTableError(GraderError, ValueError):
    """The price table could not be read: the message names the file and the entry."""


@dataclass(frozen=True, slots=True)
class ModelPrice:
    """One model's prices per million tokens (the table's currency: USD by convention)."""

    input: float
    output: float
    cached_input: float | None = None


@dataclass(frozen=True, slots=True)
class PriceTable:
    """Prices by model name; :meth:`cost` prices one response's usage."""

    models: Mapping[str, ModelPrice]
    source: str = ""

    def price(self, model: str | None) -> ModelPrice | None:
        """The model's price: by its exact name, else without a snapshot date; else None."""
        if not model:
            return None
        found = self.models.get(model)
        if found is None:
            found = self.models.get(_SNAPSHOT.sub("", model))
        return found

    def cost(self, model: str | None, usage: Mapping[str, int | None] | None) -> float | None:
        """What ``usage`` (grader/usage.py's shape) cost for ``model``; None when the model has
        no price or the input or output count was not reported."""
        price = self.price(model)
        if price is None or usage is None:
            return None
        tokens_in, tokens_out = usage.get("input_tokens"), usage.get("output_tokens")
        if tokens_in is None or tokens_out is None:
            return None
        cached = min(usage.get("cached_input_tokens") or 0, tokens_in)
        cached_rate = price.input if price.cached_input is None else price.cached_input
        total = (tokens_in - cached) * price.input + cached * cached_rate
        total += tokens_out * price.output
        return round(total / 1_000_000, 12)


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise PriceTableError(f"{where}: expected a number >= 0, got {value!r}")
    return float(value)


def parse_prices(data: Any, source: str = "<prices>") -> PriceTable:
    """The table from parsed YAML; every problem is a :class:`PriceTableError`."""
    if not isinstance(data, Mapping) or set(data) != {"models"}:
        raise PriceTableError(f"{source}: expected one key, 'models'")
    models = data["models"]
    if not isinstance(models, Mapping) or not models:
        raise PriceTableError(f"{source}: 'models' must map model names to prices")
    table: dict[str, ModelPrice] = {}
    for name, entry in models.items():
        where = f"{source}: models.{name}"
        if not isinstance(name, str) or not name:
            raise PriceTableError(f"{source}: a model name must be a non-empty string")
        if not isinstance(entry, Mapping):
            raise PriceTableError(f"{where}: expected input, output and optional cached_input")
        unknown = sorted(str(k) for k in entry if k not in _KINDS)
        if unknown:
            raise PriceTableError(f"{where}: unknown key(s) {', '.join(unknown)}")
        missing = [k for k in ("input", "output") if k not in entry]
        if missing:
            raise PriceTableError(f"{where}: missing {', '.join(missing)}")
        cached = entry.get("cached_input")
        table[name] = ModelPrice(
            input=_number(entry["input"], f"{where}.input"),
            output=_number(entry["output"], f"{where}.output"),
            cached_input=None if cached is None else _number(cached, f"{where}.cached_input"),
        )
    return PriceTable(table, source)


def load_prices(path: Path) -> PriceTable:
    """Read and check the price table at ``path``."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PriceTableError(f"{path}: cannot read the price table: {exc}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise PriceTableError(f"{path}: not valid YAML: {exc}") from exc
    return parse_prices(data, str(path))
