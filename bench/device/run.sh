#!/usr/bin/env bash
# On a lent many-core machine: install the wheels bench/device/prepare.sh packed into .device/
# (nothing is fetched there), put the packed wrk on PATH, and run the figures that need the
# cores: bench/perf.py --many-core (1/2/4/8 workers against the floor at each count, grading on a
# core of its own; about three minutes). The table goes to stdout and to $OUT/many_core.md.
# Other scenarios, named as arguments (one or more, in order): `bfcl`, bench/bfcl_bench.py on
# one quiet core (BFCL's checker vs the public grading surfaces, ratios), to $OUT/bfcl.md;
# `enforce`, bench/enforce_bench.py (enforced answers, text TTFB, observe throughput), to
# $OUT/enforce.md.
#   run(command="bash bench/device/run.sh [many-core|bfcl|enforce]...", carry=[".device"])
set -uo pipefail
cd "$(dirname "$0")/../.."
if [ ! -d .device/whl ]; then
  echo "no .device/ here: run bench/device/prepare.sh first and carry .device" >&2
  exit 2
fi
PYTHON=${PYTHON:-python3}
site=$(mktemp -d /tmp/gp-site.XXXXXX)
"$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" \
  .device/whl/*.whl || exit 2
export PYTHONPATH="$site:$PWD" PYTHONUNBUFFERED=1
export PATH="$PWD/.device/bin:$PATH"
export LD_LIBRARY_PATH="$PWD/.device/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "cores: $(nproc); $("$PYTHON" --version); wheels packed for Python $(cat .device/python-version)"
wrk --version 2>&1 | head -1
out=${OUT:-/tmp}
status=0
for scenario in "${@:-many-core}"; do
  case "$scenario" in
    many-core) "$PYTHON" bench/perf.py --many-core 2>&1 | tee "$out/many_core.md" ;;
    bfcl) taskset -c 8 "$PYTHON" bench/bfcl_bench.py --repeat "${REPEAT:-5}" 2>&1 | tee "$out/bfcl.md" ;;
    enforce) "$PYTHON" bench/enforce_bench.py --requests 2000 --rounds 5 2>&1 | tee "$out/enforce.md" ;;
    *) echo "usage: run.sh [many-core|bfcl|enforce]..." >&2; exit 2 ;;
  esac
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
done
exit "$status"
