"""``python -m bench [SCENARIO [ARGS...]]``: the one entry to every benchmark.

Each scenario is a script in this folder that prints its figures beside a baseline measured in
the same run (never a timed assertion). This entry only names them and runs the chosen one as
its own process, with the arguments passed through, so a scenario's start-up and imports are
its own and ``python bench/NAME.py`` keeps working. Without a scenario it lists them all.
Comparing two git revisions: ``python -m bench ab --base REV`` (load, CPU per request) or
``python -m bench instructions --base REV`` (instruction counts, immune to noise).
Where each figure is quoted, and how it was measured: docs/performance.md.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True, slots=True)
class Scenario:
    script: str
    summary: str


SCENARIOS: dict[str, Scenario] = {
    "perf": Scenario(
        "perf.py", "the proxy's throughput, latency, TTFB, RSS and loop lag against the floor"
    ),
    "ab": Scenario("ab.py", "this tree against a git revision under load (--base REV)"),
    "instructions": Scenario(
        "instructions_bench.py", "instructions per graded answer against a revision (valgrind)"
    ),
    "server-instructions": Scenario(
        "server_instructions.py", "instructions per request of whole servers (valgrind)"
    ),
    "soak": Scenario("soak.py", "RSS and rows == graded over a bounded soak"),
    "loop-lag": Scenario("loop_lag_bench.py", "event-loop lag while hostile answers are graded"),
    "grader": Scenario("grader_bench.py", "grades per second, adversarial answers in ms"),
    "capture": Scenario("capture_bench.py", "stream capture speed, chat and Responses"),
    "episodes": Scenario("episodes_bench.py", "agent-episode grading by episode length"),
    "offline": Scenario("offline_bench.py", "rows per second for grade, export, regrade, gate"),
    "bfcl": Scenario("bfcl_bench.py", "gradeproxy against BFCL's own checker, same answers"),
    "bfcl-checker": Scenario(
        "bfcl_checker_process.py", "BFCL's own checker as a process (bfcl's anchor)"
    ),
    "otel": Scenario("otel_bench.py", "OpenTelemetry export's cost, off against on"),
    "shadow": Scenario("shadow_bench.py", "primary latency with and without a shadow"),
    "capture-untagged": Scenario(
        "capture_bench_untagged.py", "untagged requests with capture rows off, kept and hashed"
    ),
    "enforce": Scenario(
        "enforce_bench.py", "enforced answers, text-stream TTFB and throughput against off"
    ),
    "ui": Scenario("ui_bench.py", "what the live page costs to build and read"),
    "upstream": Scenario("upstream_bench.py", "the upstream client against aiohttp's"),
    "transport": Scenario(
        "transport_bench.py", "forwarded throughput per upstream client against the floor"
    ),
    "schema": Scenario(
        "schema_bench.py", "uniqueItems and long enums through grader.grade against jsonschema"
    ),
    "rowsdb": Scenario(
        "rowsdb_bench.py", "the rows database sink against the file sink; outages; 3 replicas"
    ),
    "grading-ipc": Scenario(
        "grading_ipc_bench.py", "what a grade job costs the proxy: in a thread or the child"
    ),
    "review": Scenario("review_bench.py", "the review queue: first load, then each label post"),
}


def usage() -> str:
    width = max(map(len, SCENARIOS))
    script = max(len(scenario.script) for scenario in SCENARIOS.values())
    lines = ["usage: python -m bench SCENARIO [ARGS...]   (ARGS go to the scenario; --help too)"]
    lines += [
        f"  {name:<{width}}  {scenario.script:<{script}}  {scenario.summary}"
        for name, scenario in SCENARIOS.items()
    ]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help", "list"):
        print(usage())
        return 0
    name, *rest = argv
    scenario = SCENARIOS.get(name)
    if scenario is None:
        print(f"python -m bench: no scenario {name!r}\n{usage()}", file=sys.stderr)
        return 2
    return subprocess.call([sys.executable, str(HERE / scenario.script), *rest])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
