"""BFCL's own checker as a process over an answers file: the anchor of ``gradeproxy grade``.

Reads the same answers JSONL that ``gradeproxy grade`` reads (``{"task_id", "answer"}``, the
answer as the tool-call JSON a client receives), finds each entry's question and possible
answer in bfcl-eval's installed data by id, decodes the answer as BFCL's OpenAI FC handler does
(``json.loads`` of each call's ``arguments``; a text answer is no call) and grades it with
``ast_checker`` (``is_empty_output`` for irrelevance entries, its negation for relevance ones).
Writes one result line per answer (``{"id", "valid", "error"?}``) to ``--out`` and prints the
count: what BFCL's evaluation does per entry, without its model handlers.

Run: ``python bench/bfcl_checker_process.py --answers answers.jsonl --out results.jsonl``
(needs bfcl-eval: scripts/install-bfcl.sh). Used by bench/bfcl_bench.py.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.bfcl_checker import MODEL, load_bfcl


def _entries(data: Path, categories: set[str]) -> dict[str, tuple[str, Any, Any]]:
    """Every entry of ``categories``: id -> (category, function docs, possible answer)."""
    found: dict[str, tuple[str, Any, Any]] = {}
    for category in sorted(categories):
        answers: dict[str, Any] = {}
        path = data / "possible_answer" / f"BFCL_v4_{category}.json"
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                entry = json.loads(line)
                answers[entry["id"]] = entry["ground_truth"]
        for line in (data / f"BFCL_v4_{category}.json").read_text(encoding="utf-8").splitlines():
            entry = json.loads(line)
            found[entry["id"]] = (category, entry["function"], answers.get(entry["id"]))
    return found


def _category(entry_id: str) -> str:
    """BFCL's category of an entry id (``live_simple_3-2-0`` -> ``live_simple``)."""
    found = re.match(r"(.+?)_\d", entry_id)
    return found.group(1) if found else entry_id


def _decode(answer: str) -> list[dict[str, Any]]:
    """BFCL's OpenAI FC decode: ``[{name: json.loads(arguments)}]``; a text answer is none."""
    try:
        value = json.loads(answer)
    except ValueError:
        return []
    calls = value.get("tool_calls") if isinstance(value, dict) else None
    if not isinstance(calls, list):
        return []
    return [{c["function"]["name"]: json.loads(c["function"]["arguments"])} for c in calls]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--answers", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    checker, language, is_empty, data = load_bfcl()
    rows = [json.loads(line) for line in args.answers.read_text(encoding="utf-8").splitlines()]
    categories = {_category(row["task_id"]) for row in rows}
    entries = _entries(data, categories)
    valid = 0
    with args.out.open("w", encoding="utf-8") as out:
        for row in rows:
            category, functions, truth = entries[row["task_id"]]
            decoded = _decode(row["answer"])
            if "irrelevance" in category:
                result: dict[str, Any] = {"valid": bool(is_empty(decoded))}
            elif "relevance" in category:
                result = {"valid": not is_empty(decoded)}
            else:
                result = checker(functions, decoded, truth, language.PYTHON, category, MODEL)
            valid += bool(result["valid"])
            line = {"id": row["task_id"], "valid": result["valid"], "error": result.get("error")}
            out.write(json.dumps(line) + "\n")
    print(f"{len(rows)} answers, {valid} valid")


if __name__ == "__main__":
    main()
