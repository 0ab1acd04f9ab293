"""Instructions per graded answer, this tree against a git revision: a figure noise cannot move.

Wall-clock and CPU-time figures on a shared machine swing by 10% between runs of the same code
(bench/ab.py loads both versions at the same instants to cancel the drift; even so a few
percent is its resolution). The instructions a function runs do not swing: this runs the
grading path's parts in a loop under valgrind's callgrind, once with no calls and once with
``--calls`` of them, and divides the difference by the calls. Startup and imports cancel out.
Hash randomisation is fixed (``PYTHONHASHSEED=0``) so both trees walk their dicts alike.

What it does not see: cache misses and branch mispredictions. In the server, grading costs 2-5x
its hot-loop time because its code and data start cold (README, "Performance"), and a cut in
instructions shows end to end at about a quarter of its size. It ranks changes to the grading
path; bench/ab.py and bench/perf.py say what they are worth to a request.

Parts: ``grade_job`` on the bench backend's tool-call body, and on its stream; ``record``: one
job's rows reduced, counted and appended (``recording`` + ``Recorder.record``); ``record_batch``:
the same per job when the writer thread takes 64 at once, as a busy grade queue hands them over
(``WriterThread._write_all``); ``record_batch_failing``: the same for a failing answer (the fake
backend's call against a task that does not expect its ``unit``), whose row also becomes an
entry of the failure inspector's ring. The proxy benches grade the passing one
(bench/_perf_load.py's ``TASK``).

Run: ``python bench/instructions_bench.py [--base HEAD] [--calls 2000]`` (needs valgrind:
``apt-get install valgrind``; about a minute per callgrind run, and a comparison is twenty
of them, two at a time on two cores: about 7 minutes in all).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from _perf_load import export
from _servers import CALL_BODY, STREAM_FIRST, STREAM_REST

ROOT = Path(__file__).resolve().parents[1]
PARTS = ("grade_job_body", "grade_job_stream", "record", "record_batch", "record_batch_failing")
BATCH = 64  # jobs per call of record_batch; its figure is per job

# Run inside the tree under test (its modules first on sys.path); the bodies come from here so
# both trees grade the same bytes.
DRIVER = """
import sys, tempfile, time
from pathlib import Path
part, calls = sys.argv[1], int(sys.argv[2])
BODY, STREAM = {body!r}, {stream!r}
from grader.loader import load_tasks
from proxy.pipeline.grade import GradeJob, grade_job
from proxy.pipeline.record.failures import FailureRing
from proxy.pipeline.record.metrics import ProxyMetrics
from proxy.pipeline.record.recording import Recorder, RecordOptions, WriterThread, recording
from proxy.pipeline.record.results import ResultWriter
folder = Path(tempfile.mkdtemp())
(folder / "tasks.jsonl").write_text(
    '{{"id":"bench.weather","expected":{{"name":"get_weather","arguments":'
    '{{"city":"Zurich","unit":"celsius"}}}},"metadata":{{"mutationKind":"field_renamed"}}}}\\n'
    '{{"id":"bench.city","expected":{{"name":"get_weather","arguments":{{"city":"Zurich"}}}}}}\\n'
)
tasks = load_tasks(folder / "tasks.jsonl")
task = tasks.get("bench.weather")
def job(stream, graded=task):
    return GradeJob(
        request_id="8f14e45fceea167a5a36dedd4bea2543", task=graded, tasks_digest=tasks.digest,
        upstream="http://127.0.0.1:1/v1", stream=stream,
        request_body=b'{{"model":"bench-model","messages":[{{"role":"user","content":"hi"}}]}}',
        response=list(STREAM) if stream else [BODY], finished_at=time.perf_counter(),
        timings={{"duration_s": 0.001234, "ttfb_s": 0.0011, "overhead_s": 0.0002}},
    )
options = RecordOptions(True, 100)
recorder = Recorder(
    ProxyMetrics(), ResultWriter(folder / "grades.jsonl", 1 << 40, 0), FailureRing(100, True)
)
body_job, stream_job = job(False), job(True)
rows = grade_job(body_job, True).rows
def record():
    done = recording(task, [dict(row) for row in rows], body_job.finished_at, options)
    recorder.record(task.id, "primary", done)
writes = WriterThread(recorder, options)
def record_batch():
    writes._write_all([(body_job, None, [dict(row) for row in rows]) for _ in range({batch})])
failing_job = job(False, tasks.get("bench.city"))  # the task expects no unit
failing_rows = grade_job(failing_job, True).rows  # "arguments.unit unexpected": a fail
def record_batch_failing():
    writes._write_all(
        [(failing_job, None, [dict(row) for row in failing_rows]) for _ in range({batch})]
    )
run = {{
    "grade_job_body": lambda: grade_job(body_job, True),
    "grade_job_stream": lambda: grade_job(stream_job, True),
    "record": record,
    "record_batch": record_batch,
    "record_batch_failing": record_batch_failing,
}}[part]
for _ in range(200):  # warm: first-call caches (the column cache, the label children) filled
    run()
for _ in range(calls):
    run()
"""


def instructions(tree: Path, driver: Path, part: str, calls: int) -> int:
    """Instructions callgrind collected for one run of the driver in ``tree``."""
    env = dict(os.environ, PYTHONHASHSEED="0", PYTHONPATH=str(tree))
    done = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--callgrind-out-file=/dev/null",
            sys.executable,
            str(driver),
            part,
            str(calls),
        ],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
    )
    for line in done.stderr.splitlines():
        if "Collected :" in line:
            return int(line.split(":")[-1].strip())
    tail = (done.stdout + done.stderr)[-600:]
    raise RuntimeError(f"{tree.name} {part}: no instruction count (exit {done.returncode}): {tail}")


def per_call(tree: Path, driver: Path, calls: int) -> dict[str, float]:
    """Instructions per call of each part: (N calls - none) / N, runs two at a time or more."""
    jobs = [(part, n) for part in PARTS for n in (0, calls)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        counts = dict(
            zip(jobs, pool.map(lambda j: instructions(tree, driver, j[0], j[1]), jobs), strict=True)
        )
    jobs_per_call = {part: BATCH if part.startswith("record_batch") else 1 for part in PARTS}
    return {
        part: (counts[(part, calls)] - counts[(part, 0)]) / calls / jobs_per_call[part]
        for part in PARTS
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="HEAD", help="git revision to compare against")
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (apt-get install valgrind)", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="gp-instr-") as scratch:
        folder = Path(scratch)
        driver = folder / "driver.py"
        driver.write_text(
            DRIVER.format(body=CALL_BODY, stream=[STREAM_FIRST, *STREAM_REST], batch=BATCH)
        )
        base = folder / "base"
        base.mkdir()
        export(args.base, base)
        try:
            before = per_call(base, driver, args.calls)
            after = per_call(ROOT, driver, args.calls)
        except RuntimeError as error:  # a figure that cannot be produced fails the run
            print(error, file=sys.stderr)
            return 1
    print(f"instructions per call (callgrind, {args.calls} calls): this tree vs {args.base}")
    print(f"| part | {args.base} | this tree | this / base |")
    print("|---|---|---|---|")
    for part in PARTS:
        ratio = after[part] / before[part]
        print(f"| {part} | {before[part]:,.0f} | {after[part]:,.0f} | {ratio:.3f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
