"""BFCL's checker vs gradeproxy on the public surfaces a user runs, the same answers, one run.

Answers: ``--answers`` (default 10,000) of the conformance corpus (tests/support/bfcl.py:
BFCL_v4 simple_python, multiple, parallel, parallel_multiple and irrelevance items, ten mutation
kinds), picked evenly, each the tool-call JSON a client receives. Tasks: those items through
``grader.importers.bfcl.convert`` (what ``gradeproxy import bfcl`` writes), as a task file.

Three pairs, each printed with its ratio (BFCL's time over ours: above 1x, ours is faster):

* ``grader.grade(task, answer)`` per answer, tasks loaded once, vs BFCL in process: its OpenAI FC
  decode (``json.loads`` of the answer and of each call's ``arguments``) then ``ast_checker``
  (``is_empty_output`` for irrelevance items) per answer;
* ``grader.grade_run(tasks, answers)`` over the whole answers list (rows and report built) vs
  the same BFCL loop;
* ``gradeproxy grade --tasks --answers --out --report`` as a whole process (start-up, task
  file, answers file, rows written) vs ``bench/bfcl_checker_process.py`` (BFCL's checker as a
  process over the same answers file, a result line per answer written); then the same command
  with ``--task-cache``, cold (an empty cache folder each run: the task set is loaded and
  stored) and warm (the entry a first, untimed run stored is read back), and with ``--jobs 2``
  (its CPU time is the children's too; its wall time is the point).

In process: CPU time of this process, the two sides taking turns ``--repeat`` times, best of
each. Our packages are byte-compiled first, as pip compiled bfcl-eval's at install: an edited
checkout run with ``PYTHONDONTWRITEBYTECODE`` would otherwise compile them in every process.
Processes: CPU time (user + system) of the child, and wall time, best of ``--repeat``; then the
peak memory (max RSS) of one run of each process, and of one with the answers file ten times
over (whether memory grows with the answers). Also printed: the start-up of ``gradeproxy grade
--help`` and of a bare interpreter, and the load of the task file. Needs bfcl-eval
(scripts/install-bfcl.sh). Run:
``python bench/bfcl_bench.py [--answers N] [--repeat N]``.
"""

from __future__ import annotations

import argparse
import compileall
import gc
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import grader
from grader.importers.bfcl import convert
from grader.json import dumps
from tests.support.bfcl import Case, Conformance
from tests.support.bfcl_checker import MODEL

ROOT = Path(__file__).resolve().parents[1]


def _pick(cases: list[Case], count: int) -> list[Case]:
    """``count`` cases spread evenly over the corpus (every kind and category represented)."""
    if count >= len(cases):
        return cases
    return [cases[i * len(cases) // count] for i in range(count)]


def _write_inputs(conf: Conformance, cases: list[Case], folder: Path) -> tuple[Path, Path]:
    tasks = folder / "tasks.jsonl"
    with tasks.open("wb") as out:
        for item in conf.items:
            out.write(dumps(convert(item.question, item.answer)) + b"\n")
    answers = folder / "answers.jsonl"
    with answers.open("wb") as out:
        for case in cases:
            out.write(dumps({"task_id": case.item.question["id"], "answer": case.wire}) + b"\n")
    return tasks, answers


def _bfcl_loop(conf: Conformance, cases: list[Case]) -> Callable[[], object]:
    """BFCL in process over ``cases``: decode, then ``ast_checker`` (or ``is_empty_output``)."""
    checker, python, is_empty, decode = (
        conf.ast_checker,
        conf.language.PYTHON,
        conf.is_empty,
        conf.decode,
    )
    work = [(c.wire, c.calls is None, c.item) for c in cases]

    def run() -> object:
        results = []
        for wire, text, item in work:
            decoded = [] if text else decode(wire)
            if item.answer is None:
                results.append({"valid": bool(is_empty(decoded))})
                continue
            truth = item.answer["ground_truth"]
            function = item.question["function"]
            results.append(checker(function, decoded, truth, python, item.category, MODEL))
        return results

    return run


def _cpu(fn: Callable[[], object]) -> float:
    gc.collect()
    gc.disable()
    try:
        start = time.process_time()
        fn()
        return time.process_time() - start
    finally:
        gc.enable()


def _best_pair(
    theirs: Callable[[], object], ours: Callable[[], object], repeat: int
) -> tuple[float, float]:
    """Each side's best CPU time of ``repeat`` runs, the two taking turns."""
    best = [float("inf"), float("inf")]
    for run in range(repeat):
        order = [(0, theirs), (1, ours)] if run % 2 == 0 else [(1, ours), (0, theirs)]
        for index, fn in order:
            best[index] = min(best[index], _cpu(fn))
    return best[0], best[1]


CHUNK = 200  # answers timed at once: a few milliseconds, short against the load's swings


def _chunked_pair(
    theirs: Callable[[list[Case]], object],
    ours: Callable[[list[Case]], object],
    cases: list[Case],
    repeat: int,
    prepare: Callable[[list[Case]], object],
) -> tuple[float, float]:
    """CPU time of each side over ``cases``, a chunk of :data:`CHUNK` answers at a time (each
    chunk first given to ``prepare``, untimed), the sides taking turns on every chunk, each
    chunk's best of ``repeat`` runs summed: on a shared machine a burst of load then spoils a
    few chunks of one run instead of a whole run."""
    chunks = [cases[i : i + CHUNK] for i in range(0, len(cases), CHUNK)]
    for chunk in chunks:
        prepare(chunk)
    best = [[float("inf")] * len(chunks), [float("inf")] * len(chunks)]
    for run in range(repeat):
        order = [(0, theirs), (1, ours)] if run % 2 == 0 else [(1, ours), (0, theirs)]
        gc.collect()
        gc.disable()
        for c, chunk in enumerate(chunks):
            for index, fn in order:
                start = time.process_time()
                fn(chunk)
                best[index][c] = min(best[index][c], time.process_time() - start)
        gc.enable()
    return sum(best[0]), sum(best[1])


def _child(argv: list[str]) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one child process run to completion."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, check=False, cwd=ROOT)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{argv[0]} failed ({done.returncode}): {done.stderr.decode()[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


# Runs a command and prints its peak memory (KiB) and exit code. A child's peak counts the
# memory of the process it was forked from (the kernel keeps it across exec): forked from this
# bench's large process, every command would read as large. Forked from this small one, it
# reads as what it uses itself.
_PEAK = (
    "import os, subprocess, sys\n"
    "child = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
    "_, status, usage = os.wait4(child.pid, 0)\n"
    "print(usage.ru_maxrss, os.waitstatus_to_exitcode(status))\n"
)


def _peak_memory(argv: list[str]) -> int:
    """Peak resident memory (KiB) of one run of ``argv``, its own (see :data:`_PEAK`)."""
    done = subprocess.run(
        [sys.executable, "-c", _PEAK, *argv], capture_output=True, text=True, check=True, cwd=ROOT
    )
    peak, code = map(int, done.stdout.split())
    if code != 0:
        raise SystemExit(f"{argv[0]} failed ({code}) when its memory was measured")
    return peak


def _best_children(
    argvs: list[list[str]], repeat: int, before: Callable[[int], None] | None = None
) -> list[tuple[float, float]]:
    """Each command's best (CPU, wall) of ``repeat`` runs, taking turns; ``before(index)`` is
    called, untimed, before each run of command ``index``."""
    best = [(float("inf"), float("inf"))] * len(argvs)
    for run in range(repeat):
        order = list(range(len(argvs)))
        if run % 2:
            order.reverse()
        for index in order:
            if before is not None:
                before(index)
            cpu, wall = _child(argvs[index])
            best[index] = (min(best[index][0], cpu), min(best[index][1], wall))
    return best


def _line(label: str, n: int, theirs: float, ours: float, unit: str = "CPU") -> None:
    print(
        f"{label:34} {n:6} answers: BFCL {theirs * 1000:8.1f} ms  ours {ours * 1000:8.1f} ms"
        f"  {unit}  ({theirs / ours:.2f}x)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--answers", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    for package in ("grader", "gradeproxy"):  # bfcl-eval's modules were compiled at install
        compileall.compile_dir(ROOT / package, quiet=1)
    conf = Conformance()
    cases = _pick(list(conf.cases()), args.answers)
    gradeproxy = shutil.which("gradeproxy", path=str(Path(sys.executable).parent))
    if gradeproxy is None:
        raise SystemExit("the gradeproxy command is not installed beside this interpreter")
    with tempfile.TemporaryDirectory(prefix="bfcl-bench-") as tmp:
        folder = Path(tmp)
        tasks_path, answers_path = _write_inputs(conf, cases, folder)
        load = min(_cpu(lambda: grader.load_tasks(tasks_path)) for _ in range(args.repeat))
        tasks = grader.load_tasks(tasks_path)
        rows = [{"task_id": c.item.question["id"], "answer": c.wire} for c in cases]
        grade = grader.grade

        by_id = {c.item.question["id"]: tasks.get(c.item.question["id"]) for c in cases}
        # Per chunk, built before its timing on both sides: BFCL's decode inputs, and our
        # (task, answer text) pairs (Case.wire writes the answer's JSON each time it is read).
        prepared: dict[int, Callable[[], object]] = {}
        ours_work: dict[int, list[tuple[grader.Task, str]]] = {}

        def ours_grade(chunk: list[Case]) -> object:
            return [grade(task, wire) for task, wire in ours_work[id(chunk)]]

        def bfcl_chunk(chunk: list[Case]) -> object:
            return prepared[id(chunk)]()

        def prepare(chunk: list[Case]) -> object:
            prepared[id(chunk)] = _bfcl_loop(conf, chunk)
            ours_work[id(chunk)] = [
                (by_id[c.item.question["id"]], c.wire)  # type: ignore[misc]
                for c in chunk
            ]
            return None

        def ours_run() -> object:
            return grader.grade_run(tasks, rows)

        bfcl = _bfcl_loop(conf, cases)
        print(
            f"BFCL (bfcl-eval checker) vs gradeproxy, {len(cases)} answers over "
            f"{len(conf.items)} tasks, best of {args.repeat}; ratio = BFCL time / ours"
        )
        _line(
            "grader.grade vs ast_checker",
            len(cases),
            *_chunked_pair(bfcl_chunk, ours_grade, cases, args.repeat, prepare),
        )
        _line(
            "grader.grade_run vs ast_checker", len(cases), *_best_pair(bfcl, ours_run, args.repeat)
        )
        ours_cmd = [
            gradeproxy, "grade", "--tasks", str(tasks_path), "--answers", str(answers_path),
            "--out", str(folder / "rows.jsonl"), "--report", str(folder / "report.json"),
        ]  # fmt: skip
        theirs_cmd = [
            sys.executable, str(ROOT / "bench" / "bfcl_checker_process.py"),
            "--answers", str(answers_path), "--out", str(folder / "bfcl.jsonl"),
        ]  # fmt: skip
        start_cmds = [[sys.executable, "-c", "pass"], [gradeproxy, "grade", "--help"]]
        cold, warm = folder / "cache-cold", folder / "cache-warm"
        cached = [
            *ours_cmd[:-4],
            *("--out", str(folder / "rows-cached.jsonl")),
            *("--report", str(folder / "report-cached.json")),
        ]
        cold_cmd = [*cached, "--task-cache", str(cold)]
        warm_cmd = [*cached, "--task-cache", str(warm)]
        jobs_cmd = [
            *ours_cmd[:-4],
            *("--out", str(folder / "rows-jobs.jsonl")),
            *("--report", str(folder / "report-jobs.json")),
            *("--jobs", "2"),
        ]
        _child(warm_cmd)  # the warm cache's entry, written once, untimed

        def empty_cold_cache(index: int) -> None:
            if index == 2:  # every cold run finds no entry, and stores one
                shutil.rmtree(cold, ignore_errors=True)

        timed = _best_children(
            [theirs_cmd, ours_cmd, cold_cmd, warm_cmd, jobs_cmd], args.repeat, empty_cold_cache
        )
        (t_cpu, t_wall), (o_cpu, o_wall), (c_cpu, _), (w_cpu, w_wall), (j_cpu, j_wall) = timed
        _line("gradeproxy grade vs BFCL process", len(cases), t_cpu, o_cpu)
        _line("gradeproxy grade vs BFCL process", len(cases), t_wall, o_wall, "wall")
        _line("  --task-cache, cold (stored)", len(cases), t_cpu, c_cpu)
        _line("  --task-cache, warm (read)", len(cases), t_cpu, w_cpu)
        _line("  --task-cache, warm (read)", len(cases), t_wall, w_wall, "wall")
        _line("  --jobs 2", len(cases), t_cpu, j_cpu)
        _line("  --jobs 2", len(cases), t_wall, j_wall, "wall")
        (bare, _), (helped, _) = _best_children(start_cmds, args.repeat)
        print(
            f"start-up CPU: bare interpreter {bare * 1000:.0f} ms, gradeproxy grade --help "
            f"{helped * 1000:.0f} ms; task file load ({len(tasks)} tasks) {load * 1000:.0f} ms"
        )
        # Memory as the answers file grows: the same answers, then ten times over.
        many = folder / "answers-x10.jsonl"
        many.write_bytes(answers_path.read_bytes() * 10)

        def theirs_on(answers: Path) -> list[str]:
            return [*theirs_cmd[:2], "--answers", str(answers), "--out", str(folder / "b.jsonl")]

        def ours_on(answers: Path) -> list[str]:
            return [*ours_cmd[:4], "--answers", str(answers), "--out", str(folder / "r.jsonl")]

        peaks = [
            _peak_memory(on(answers))
            for answers in (answers_path, many)
            for on in (theirs_on, ours_on)
        ]
        print(
            f"peak memory (max RSS): {len(cases)} answers BFCL {peaks[0] / 1024:.0f} MB, ours "
            f"{peaks[1] / 1024:.0f} MB; {10 * len(cases)} answers BFCL {peaks[2] / 1024:.0f} MB, "
            f"ours {peaks[3] / 1024:.0f} MB"
        )
        verdicts = [json.loads(line)["result"] for line in (folder / "rows.jsonl").open()]
        theirs_ok = [json.loads(line)["valid"] for line in (folder / "bfcl.jsonl").open()]
        agree = sum((v == "pass") == t for v, t in zip(verdicts, theirs_ok, strict=True))
        print(f"verdicts of the two processes agree on {agree} of {len(cases)} answers")
        plain_rows = [json.loads(line) for line in (folder / "rows.jsonl").open()]
        for option, name in (
            ("--task-cache", "rows-cached.jsonl"),
            ("--jobs 2", "rows-jobs.jsonl"),
        ):
            other = [json.loads(line) for line in (folder / name).open()]
            same = sum(
                {**a, "row_id": None} == {**b, "row_id": None}
                for a, b in zip(plain_rows, other, strict=True)
            )
            print(
                f"rows with and without {option} identical (row ids aside): {same} of {len(cases)}"
            )


if __name__ == "__main__":
    main()
