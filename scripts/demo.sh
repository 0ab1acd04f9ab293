#!/usr/bin/env bash
# The main job from a fresh machine: install, then run the live demo (proxy + demo backend +
# sample traffic through the official openai SDK + a scoreboard read from /metrics), and keep
# serving. Arguments go to `gradeproxy demo` (e.g. --exit, --port 9000).
#
# The install runs only when the environment lacks gradeproxy or pyproject.toml changed since the
# last one (a stamp file holds its hash: the install is editable, so code changes need none). It
# shows one line per step instead of pip's output, which it prints in full only if pip fails.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${GRADEPROXY_VENV:-.venv}"
STAMP="${VENV}/.gradeproxy-demo-stamp"
want="$(sha256sum pyproject.toml | cut -d' ' -f1) [demo]"

say() { echo "demo.sh: $*" >&2; }

# pip's lines, one short line per step ("collecting aiohttp", ...).
progress() {
    local line
    while IFS= read -r line; do
        case "${line}" in
            Collecting*) say "  collecting ${line#Collecting }" ;;
            "Installing collected packages:"*) say "  installing the packages ..." ;;
            "Successfully installed"*) say "  done" ;;
        esac
    done
}

if [ -x "${VENV}/bin/gradeproxy" ] && [ "$(cat "${STAMP}" 2>/dev/null)" = "${want}" ]; then
    say "${VENV} is up to date (pyproject.toml unchanged): no install"
else
    if [ ! -x "${VENV}/bin/python" ]; then
        say "creating the virtual environment ${VENV} ..."
        python3 -m venv "${VENV}"
    fi
    say "installing gradeproxy[demo] into ${VENV} (the first time takes a minute or so) ..."
    log="$(mktemp)"
    if ! "${VENV}/bin/python" -m pip install --disable-pip-version-check --progress-bar off \
        -e ".[demo]" 2>&1 | tee "${log}" | progress; then
        say "the install failed; pip said:"
        cat "${log}" >&2
        rm -f "${log}"
        exit 1
    fi
    rm -f "${log}"
    echo "${want}" > "${STAMP}"
fi
exec "${VENV}/bin/gradeproxy" demo "$@"
