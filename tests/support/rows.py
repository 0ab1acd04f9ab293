"""Row comparisons that set ``row_id`` aside: an offline row's id is a fresh UUID each time it
is built, so two builds of the same verdict differ there and only there (checked here)."""

from __future__ import annotations

import uuid
from typing import Any


def without_row_id(value: Any) -> Any:
    """``value`` with every row's ``row_id`` checked to be a UUID and then left out (rows may
    sit anywhere in it: a list, a report's ``results``, a ``verdict`` envelope)."""
    if isinstance(value, dict):
        if "row_id" in value:
            uuid.UUID(value["row_id"])  # raises on anything but a UUID
        return {k: without_row_id(v) for k, v in value.items() if k != "row_id"}
    if isinstance(value, list):
        return [without_row_id(v) for v in value]
    return value
