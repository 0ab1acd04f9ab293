#!/usr/bin/env bash
# Pack, here, what bench/device/run.sh needs on a lent many-core machine, which reaches no
# registry and has no wrk: gradeproxy's runtime dependencies as wheels for that machine's
# Python (3.12, manylinux x86-64) at the versions this checkout's venv runs (bench/device/pins.py),
# and wrk with the one library it links beyond glibc and OpenSSL (LuaJIT). Everything lands in
# .device/ (ignored by git, 14 MB); the device call carries it:
#   run(command="bash bench/device/run.sh", carry=[".device"], timeout_s=480)
# Run from anywhere: bash bench/device/prepare.sh   (PYVER=3.12 and PY=.venv/bin/python by default)
set -euo pipefail
cd "$(dirname "$0")/../.."
PYVER=${PYVER:-3.12}
PY=${PY:-.venv/bin/python}
command -v wrk >/dev/null || { echo "wrk is not installed here (apt-get install wrk)" >&2; exit 1; }

rm -rf .device
mkdir -p .device/whl .device/bin .device/lib
platforms=()
for tag in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 \
    manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64 manylinux_2_31_x86_64 \
    manylinux_2_34_x86_64 manylinux_2_35_x86_64; do
  platforms+=(--platform "$tag")
done
"$PY" bench/device/pins.py --python-version "$PYVER" > .device/pins.txt
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "$PYVER" \
  --implementation cp "${platforms[@]}" -d .device/whl -r .device/pins.txt

# BFCL's checker for `run.sh bfcl` (bench/bfcl_bench.py's anchor): pure-Python wheels, pinned as
# scripts/install-bfcl.sh pins them.
"$PY" -m pip download -q --no-deps --only-binary=:all: -d .device/whl \
  "bfcl-eval==2026.3.23" "filelock==4.3.1"

cp "$(command -v wrk)" .device/bin/wrk
luajit=$(ldd "$(command -v wrk)" | awk '/libluajit/ {print $3}')
cp -L "$luajit" .device/lib/
echo "$PYVER" > .device/python-version
echo "packed $(ls .device/whl | wc -l) wheels and wrk into .device ($(du -sh .device | cut -f1))"
