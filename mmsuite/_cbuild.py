"""cffi API-mode build of the CPU ladder: one extension per csrc/NN_<name>.c rung,
``mmsuite._cladder.<name>``, each with the runtime helpers.

Run by setuptools through ``cffi_modules`` in setup.py (``CFFI_MODULES``). Each rung
file defines ``void mm_<name>(MM_ARGS)``; the modules come from the file list, so
adding a rung needs no edit here. A rung may also define
``const char *mm_<name>_config(void)``, a line saying how it was built and blocked for
this machine; it is declared when the file defines it.

Why one extension per rung: a rung's shared object is then the exact code it runs, so
a change to one rung leaves every other rung's object byte-identical, and a regression
gate can say so (``mmsuite.identity``) instead of timing code that did not change. In
one shared library, a change to one rung also moved every other rung's code, and two
builds of an unchanged rung measured up to 11% apart under load. The build maps the
source directory's path out of the debug information, so that the same source built
in two checkouts gives the same bytes.

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


PACKAGE = "mmsuite._cladder"
RUNTIME = "runtime.c"
#: The runtime's functions every extension exports beside its kernel (a plugin's too).
RUNTIME_DECLARATIONS = """
    void mm_set_threads(int threads);
    int mm_max_threads(void);
    int mm_team_threads(void);
    const char *mm_cflags(void);
"""


def compile_flags() -> list[str]:
    """-O3, the host's vector ISA and OpenMP; MMSUITE_CFLAGS replaces them."""
    if os.environ.get("MMSUITE_CFLAGS"):
        return os.environ["MMSUITE_CFLAGS"].split()
    flags = ["-O3", "-fopenmp", "-std=c11", "-Werror=implicit-function-declaration"]
    if sysconfig.get_platform().endswith(("x86_64", "amd64")):
        flags.append("-march=native")
    return flags


def rung_files() -> dict[str, str]:
    """Each rung's name and its file in csrc/, in ladder order."""
    return {m.group(1): f for f in sorted(os.listdir(CSRC)) if (m := RUNG_FILE.match(f))}


def rung_names() -> list[str]:
    return list(rung_files())


def config_function(name: str) -> str | None:
    """The rung's ``mm_<name>_config`` function, where its file defines one."""
    function = f"mm_{name}_config"
    text = (CSRC / rung_files()[name]).read_text()
    return function if re.search(rf"\bconst char \*{function}\(void\)", text) else None


def make_builder(name: str) -> FFI:
    """The extension ``mmsuite._cladder.<name>``: rung ``name`` and the runtime helpers."""
    # The builds of two checkouts differ only by their paths, which the debug
    # information would record: map them out, so equal sources give equal bytes.
    flags = compile_flags() + [f"-ffile-prefix-map={ROOT}=."]
    config = config_function(name)
    # The same prototypes go to cffi (cdef) and to the C wrapper (set_source):
    # without them C would call the rung through an implicit declaration.
    declarations = "\n".join(
        [f"void mm_{name}({ARGS});"] + ([f"const char *{config}(void);"] if config else [])
    ) + RUNTIME_DECLARATIONS
    ffi = FFI()
    ffi.cdef(declarations)
    shown = " ".join(compile_flags())
    ffi.set_source(
        f"{PACKAGE}.{name}",
        declarations + f'const char *mm_cflags(void) {{ return "{shown}"; }}',
        # setuptools wants source paths relative to setup.py.
        sources=[f"csrc/{rung_files()[name]}", f"csrc/{RUNTIME}"],
        include_dirs=["csrc"],
        extra_compile_args=flags,
        extra_link_args=["-fopenmp"],
    )
    return ffi


#: One builder per rung, each a name of this module for setup.py's ``cffi_modules``. An
#: installed mmsuite has no csrc/ beside the package: there this module only lends its
#: ABI to plugin builds (``mmsuite.backends.cpu_build``).
BUILDERS = {f"{name}_builder": make_builder(name) for name in rung_names()} \
    if CSRC.is_dir() else {}
globals().update(BUILDERS)
CFFI_MODULES = [f"mmsuite/_cbuild.py:{variable}" for variable in BUILDERS]
