"""Data shared by the grader tables."""

from __future__ import annotations

from typing import Any

EXPECTED: dict[str, Any] = {
    "name": "create_ticket",
    "arguments": {
        "title": "Printer jam",
        "priority": "high",
        "labels": ["hw", "office"],
        "tags": "web,hero",
        "eta": "PT45M",
        "amount": 4550,
        "customer": {"id": 12345678901234567890123, "tier": "gold"},
    },
}
STALE: dict[str, Any] = {
    "name": "create_ticket",
    "arguments": {
        "title": "Printer jam",
        "severity": "high",
        "labels": ["hw", "office"],
        "tags": "web,hero",
        "eta": "PT45M",
        "amount": 4550,
        "customer": {"id": 12345678901234567890123, "tier": "gold"},
    },
}
