"""cffi API-mode build of the CPU ladder: every csrc/NN_*.c rung plus the runtime helpers.

Run by setuptools through ``cffi_modules`` in setup.py. Each rung file defines
``void mm_<name>(MM_ARGS)``, where NN_<name>.c is the file name; the cdef is
generated from the file list, so adding a rung needs no edit here. A rung may
also define ``const char *mm_<name>_config(void)``, a line saying how it was
built and blocked for this machine; it is declared when the file defines it.

MMSUITE_CFLAGS replaces the compiler flags, e.g. for a build without AVX-512 on
an AVX-512 machine: MMSUITE_CFLAGS="-O3 -fopenmp -std=c11 -march=native -mno-avx512f".
"""

from __future__ import annotations

import os
import re
import sysconfig
from pathlib import Path

from cffi import FFI

ROOT = Path(__file__).resolve().parent.parent
CSRC = ROOT / "csrc"
RUNG_FILE = re.compile(r"^\d\d_(\w+)\.c$")
ARGS = ("long m, long n, long k, long batch, float alpha, const float *a, const float *b, "
        "float beta, float *c")


def compile_flags() -> list[str]:
    """-O3, the host's vector ISA and OpenMP; MMSUITE_CFLAGS replaces them."""
    if os.environ.get("MMSUITE_CFLAGS"):
        return os.environ["MMSUITE_CFLAGS"].split()
    flags = ["-O3", "-fopenmp", "-std=c11", "-Werror=implicit-function-declaration"]
    if sysconfig.get_platform().endswith(("x86_64", "amd64")):
        flags.append("-march=native")
    return flags


def rung_names() -> list[str]:
    return [m.group(1) for f in sorted(os.listdir(CSRC)) if (m := RUNG_FILE.match(f))]


def config_functions() -> list[str]:
    """The ``mm_<name>_config`` functions the rung files define."""
    found = []
    for f in sorted(os.listdir(CSRC)):
        if (m := RUNG_FILE.match(f)):
            name = f"mm_{m.group(1)}_config"
            if re.search(rf"\bconst char \*{name}\(void\)", (CSRC / f).read_text()):
                found.append(name)
    return found


def make_builder() -> FFI:
    flags = compile_flags()
    # The same prototypes go to cffi (cdef) and to the C wrapper (set_source):
    # without them C would call the rungs through implicit declarations.
    declarations = "\n".join(
        [f"void mm_{name}({ARGS});" for name in rung_names()]
        + [f"const char *{name}(void);" for name in config_functions()]) + """
        void mm_set_threads(int threads);
        int mm_max_threads(void);
        const char *mm_cflags(void);
    """
    ffi = FFI()
    ffi.cdef(declarations)
    # setuptools wants source paths relative to setup.py.
    sources = [f"csrc/{f}" for f in sorted(os.listdir(CSRC)) if f.endswith(".c")]
    ffi.set_source(
        "mmsuite._ckernels",
        declarations + f'const char *mm_cflags(void) {{ return "{" ".join(flags)}"; }}',
        sources=sources,
        include_dirs=["csrc"],
        extra_compile_args=flags,
        extra_link_args=["-fopenmp"],
    )
    return ffi


ffibuilder = make_builder()
