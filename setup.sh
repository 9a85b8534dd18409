#!/usr/bin/env bash
# Set up mmsuite in .venv, from the repository root.
#
#   ./setup.sh          the suite with OpenCL:            .venv/bin/mmsuite run
#   ./setup.sh --test   editable, with test, asv and Dask tools: .venv/bin/python -m pytest
#
# Python packages come from PyPI. Two things come from the system, where apt-get
# is available (as root, or through sudo):
# - pocl-opencl-icd: the OpenCL driver for the CPU. The PoCL wheel on PyPI
#   (pocl-binary-distribution 3.0, LLVM 14) cannot build kernels for CPUs newer
#   than Zen 4; the distribution's PoCL (3.1 with LLVM 15 on Debian 12) can, and
#   pyopencl's ICD loader finds it in /etc/OpenCL/vendors.
# - chromium (with --test): the headless browser that checks the HTML report.
# Without apt-get, install an OpenCL driver yourself (or `pip install
# '.[pocl]'` on older CPUs); mmsuite lists OpenCL as unavailable, with the
# reason, until a device builds a trivial program. MMSUITE_NO_APT=1 skips apt.
set -euo pipefail
cd "$(dirname "$0")"

mode=${1:-}
case "$mode" in
    "" ) extras="opencl"; editable="" ;;
    --test ) extras="opencl,test,bench,cluster"; editable="-e" ;;
    * ) echo "usage: ./setup.sh [--test]" >&2; exit 2 ;;
esac

packages=(pocl-opencl-icd)
[ "$mode" = --test ] && packages+=(chromium)

install_system_packages() {
    local missing=() sudo=""
    for pkg in "${packages[@]}"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" \
            || missing+=("$pkg")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "$(id -u)" -ne 0 ]; then
        if command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
            echo "setup: not root and no sudo; install ${missing[*]} yourself" >&2
            return 0
        fi
    fi
    echo "setup: installing ${missing[*]} with apt-get (its time depends on the mirror)"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
        "${missing[@]}" >/dev/null
}

if [ "${MMSUITE_NO_APT:-0}" != 1 ] && command -v apt-get >/dev/null 2>&1; then
    install_system_packages
else
    echo "setup: no apt-get (or MMSUITE_NO_APT=1): install an OpenCL driver for your CPU" \
         "yourself (PoCL 3.1 or newer), or use the '.[pocl]' extra on CPUs up to Zen 4" >&2
fi

echo "setup: creating .venv and installing mmsuite into it; pip prints nothing while it" \
     "downloads and builds the C ladder (measured: 1 min 55 s on a busy 2-core machine)"
python3 -m venv .venv
.venv/bin/python -m pip install -q $editable ".[$extras]"
echo "setup: done: .venv is ready"
