#!/usr/bin/env bash
# Builds a small venv with the NEWEST OpenTelemetry SDK release on top of the project's venv, for
# the CI stage that runs the OTLP exporter's tests against it (issue 41): the project pins the
# SDK to the minor range it was tested on (pyproject.toml), and this stage says, before the pin
# is raised, whether the next release still works. Only the OpenTelemetry packages live in it;
# everything else (pytest, the project) comes from the project's venv through a site dir added
# after its own, so the newest OpenTelemetry wins. Cached in .cache/otel-newest, rebuilt when
# PyPI has a newer release than its stamp names (a stamp check otherwise).
#
#   scripts/otel-newest-venv.sh      # build if missing or stale, print the interpreter path
#
# Environment:
#   VENV     the project's venv (default: .venv)
#   PYTHON   the interpreter that creates this one (default: the project venv's base python)
set -euo pipefail
cd "$(dirname "$0")/.."
readonly PACKAGES=(opentelemetry-api opentelemetry-sdk opentelemetry-exporter-otlp-proto-http
    opentelemetry-proto opentelemetry-exporter-otlp-proto-common)
project="${VENV:-.venv}"
venv="$PWD/.cache/otel-newest"
stamp="$venv/.gradeproxy-stamp"

newest=$("$project/bin/python" -m pip index versions opentelemetry-sdk 2>/dev/null \
    | sed -n 's/^opentelemetry-sdk (\(.*\))$/\1/p')
if [ -z "$newest" ]; then
    echo "otel-newest-venv: cannot read the newest opentelemetry-sdk from the index" >&2
    exit 1
fi
requirements=()
for package in "${PACKAGES[@]}"; do
    requirements+=("$package==$newest")
done
if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "${requirements[*]}" ]; then
    echo "$venv/bin/python"
    exit 0
fi
rm -rf "$venv"
base=$("$project/bin/python" -c 'import sys; print(sys._base_executable)')
"${PYTHON:-$base}" -m venv "$venv"
own=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
theirs=$("$project/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
# addsitedir, not a bare path: the project venv's own .pth files (its editable install) count.
echo "import site; site.addsitedir('$theirs')" > "$own/gradeproxy-project.pth"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${requirements[@]}" >&2
echo "${requirements[*]}" > "$stamp"
echo "$venv/bin/python"
