"""Plugins: kernels declared outside mmsuite join the one catalogue and are measured,
verified, identified and isolated as the ladder's rungs are."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import mmsuite
from mmsuite import catalogue, cli, identity, plugins
from mmsuite.backends import KernelUnavailable, get_backend, unavailable_reason
from mmsuite.backends.callables import gemm_views
from mmsuite.backends.cpu import ladder_cflags
from mmsuite.layout import plan_call

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "plugin"
EXAMPLE_FILE = EXAMPLE / "mmsuite_example_plugin" / "__init__.py"

GOOD_C = """\
#include "mm.h"
void mine_gemm(MM_ARGS) {
    for (long p = 0; p < batch; ++p)
        for (long i = 0; i < m; ++i)
            for (long j = 0; j < n; ++j) {
                float acc = 0.0f;
                for (long q = 0; q < k; ++q) acc += MM_A(p)[i * k + q] * MM_B(p)[q * n + j];
                MM_C(p)[i * n + j] = mm_epilogue(acc, alpha, beta, &MM_C(p)[i * n + j]);
            }
}
"""

NUMPY_GEMM = """\
import numpy as np
import mmsuite

def helper(a, b):
    return np.matmul(a, b)

def gemm(alpha, a, b, beta, c):
    product = helper(a, b) * np.float32(alpha)
    if beta:
        product += np.float32(beta) * c
    c[...] = product
"""


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A catalogue, plugin registry, MMSUITE_PLUGINS and build cache of the test's own: what a
    test adds is gone after it."""
    monkeypatch.delenv(plugins.ENV_VAR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    ids, loaded = set(catalogue.BY_ID), dict(plugins._loaded)
    yield tmp_path
    for kernel_id in set(catalogue.BY_ID) - ids:
        del catalogue._BY_ID[kernel_id]
    plugins._loaded.clear()
    plugins._loaded.update(loaded)


def write_plugin(folder: Path, body: str, name: str = "mine.py", **files: str) -> Path:
    for file_name, text in files.items():
        (folder / file_name.replace("_dot_", ".")).write_text(text)
    path = folder / name
    path.write_text(textwrap.dedent(body))
    return path


def run_cli(*args: str, capsys: pytest.CaptureFixture) -> tuple[int, str, str]:
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


# ------------------------------------------------------------------ declaring
def test_a_registered_callable_joins_the_catalogue_and_is_verified(sandbox: Path) -> None:
    path = write_plugin(sandbox, NUMPY_GEMM + 'mmsuite.register(id="mine.numpy", '
                        'backend="python", function=gemm, parent="cpu.blas")\n')
    plugins.load_file(path)
    kernel = mmsuite.get("mine.numpy")
    assert (kernel.backend, kernel.parent, kernel.plugin) == ("cpu", "cpu.blas", str(path))
    assert kernel in mmsuite.kernels("cpu")
    m = mmsuite.run("mine.numpy", mmsuite.Problem(35, 79, 19, beta=0.5), repeats=2)
    assert m.ok and m.to_record()["code"]["kernel"] == identity.plugin_kernel_hash(kernel, "")


def test_a_wrong_callable_fails_verification(sandbox: Path) -> None:
    path = write_plugin(sandbox, """\
        import mmsuite

        def off_by_one(alpha, a, b, beta, c):
            c[...] = a @ b + 1.0

        mmsuite.register(id="mine.wrong", backend="python", function=off_by_one)
        """)
    plugins.load_file(path)
    m = mmsuite.run("mine.wrong", mmsuite.Problem(17, 1, 131), repeats=1)
    assert not m.ok and m.to_record()["status"] == "failed"


def test_a_c_kernel_is_built_with_the_ladders_flags_and_verified(sandbox: Path) -> None:
    path = write_plugin(sandbox, """\
        import mmsuite
        mmsuite.register(id="mine.c", backend="cpu", source="k.c", entry="mine_gemm",
                         parent="cpu.seq_naive")
        """, k_dot_c=GOOD_C)
    plugins.load_file(path)
    for shape in [(1, 1, 1), (35, 79, 19), (131, 257, 139)]:
        m = mmsuite.run("mine.c", mmsuite.Problem(*shape, batch=2, beta=0.25), repeats=1)
        assert m.ok, m.verdict
    built = list((sandbox / "cache" / "mmsuite" / "c-plugins").glob("*/*.so"))
    assert len(built) == 1
    module = plugins_build_module(built[0])
    assert module.ffi.string(module.lib.mm_cflags()).decode() == ladder_cflags()


def plugins_build_module(path: Path):
    import importlib.util

    spec = importlib.util.spec_from_file_location(path.name.split(".")[0], path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_c_kernel_that_does_not_compile_is_unavailable_with_the_compilers_words(
        sandbox: Path) -> None:
    path = write_plugin(sandbox, """\
        import mmsuite
        mmsuite.register(id="mine.broken", backend="cpu", source="k.c", entry="mine_gemm")
        """, k_dot_c="void mine_gemm(MM_ARGS) { undeclared_thing; }\n")
    plugins.load_file(path)
    reason = unavailable_reason(mmsuite.get("mine.broken"))
    assert "k.c does not build" in reason and "error" in reason
    with pytest.raises(KernelUnavailable):
        mmsuite.run("mine.broken", mmsuite.Problem(2, 3, 5), repeats=1)


@pytest.mark.skipif(not any(k.available for k in mmsuite.kernels("opencl") if not k.reference),
                    reason="no OpenCL device builds kernels here")
def test_an_opencl_kernel_runs_with_its_geometry(sandbox: Path) -> None:
    plugins.load_file(EXAMPLE_FILE)
    for shape in [(1, 1, 1), (35, 79, 19), (67, 67, 67)]:
        m = mmsuite.run("example.cl_tiled", mmsuite.Problem(*shape, alpha=2.0), repeats=1)
        assert m.ok, m.verdict
        assert m.to_record()["info"]["geometry"] == "local 16x16, TS=16"


# ------------------------------------------------------------------ identity
def test_code_identity_follows_the_kernels_own_code(sandbox: Path) -> None:
    body = NUMPY_GEMM + ("def neighbour(alpha, a, b, beta, c):\n    c[...] = a @ b\n"
                         'mmsuite.register(id="mine.numpy", backend="python", function=gemm)\n'
                         'mmsuite.register(id="mine.other", backend="python", '
                         'function=neighbour)\n')
    first = plugins.load_file(write_plugin(sandbox, body, name="a.py"))
    hashes = {k: identity.plugin_kernel_hash(mmsuite.get(k)) for k in first.kernels}
    # A copy where only the neighbour changed, and one where the helper gemm calls changed.
    catalogue_ids = set(first.kernels)
    for kernel_id in catalogue_ids:
        del catalogue._BY_ID[kernel_id]
    plugins.load_file(write_plugin(sandbox, body.replace("c[...] = a @ b\n",
                                                         "c[...] = 1.0 * (a @ b)\n"), name="b.py"))
    assert identity.plugin_kernel_hash(mmsuite.get("mine.numpy")) == hashes["mine.numpy"]
    assert identity.plugin_kernel_hash(mmsuite.get("mine.other")) != hashes["mine.other"]
    for kernel_id in catalogue_ids:
        del catalogue._BY_ID[kernel_id]
    plugins.load_file(write_plugin(sandbox, body.replace("np.matmul(a, b)", "a @ b"),
                                   name="c.py"))
    assert identity.plugin_kernel_hash(mmsuite.get("mine.numpy")) != hashes["mine.numpy"]


def test_a_c_kernels_identity_is_its_source_and_flags(sandbox: Path) -> None:
    path = write_plugin(sandbox, 'import mmsuite\nmmsuite.register(id="mine.c", '
                        'backend="cpu", source="k.c", entry="mine_gemm")\n', k_dot_c=GOOD_C)
    kernel = plugins.load_file(path) and mmsuite.get("mine.c")
    flags = get_backend("cpu").build_flags(kernel)
    assert flags and flags == ladder_cflags()
    before = identity.plugin_kernel_hash(kernel, flags)
    assert identity.plugin_kernel_hash(kernel, "-O0") != before
    (sandbox / "k.c").write_text(GOOD_C.replace("0.0f;", "0.0f; /* edited */"))
    assert identity.plugin_kernel_hash(kernel, flags) != before


# ------------------------------------------------------------------ callables' views
@pytest.mark.parametrize("layout", ["row", "col"])
def test_a_callable_sees_the_logical_matrices_in_either_layout(layout: str) -> None:
    problem = mmsuite.Problem(3, 5, 4, batch=2, layout=layout)
    a, b, c0 = problem.inputs()
    call = plan_call(problem, (a, b, c0), layout)
    c = np.zeros(call.c_size, dtype=np.float32)
    va, vb, vc = gemm_views(call, call.a, call.b, c)
    np.testing.assert_array_equal(va, a)
    np.testing.assert_array_equal(vb, b)
    vc[...] = 7.0  # written through the view: lands in the kernel's buffer
    assert (c == 7.0).all()


# ------------------------------------------------------------------ bad plugins
BAD_PLUGINS = {
    "import error": ("import numpy\nraise ImportError('no module named magic')\n",
                     "failed to import: line 2: ImportError: no module named magic"),
    "syntax error": ("def broken(:\n", "failed to import: line 1: SyntaxError"),
    "built-in namespace": ("import mmsuite\nmmsuite.register(id='cpu.mine', backend='python', "
                           "function=print)\n", "the namespace 'cpu' is mmsuite's own"),
    "bad id": ("import mmsuite\nmmsuite.register(id='nodot', backend='python', "
               "function=print)\n", "must be NAMESPACE.NAME"),
    "missing source": ("import mmsuite\nmmsuite.register(id='mine.c', backend='cpu', "
                       "source='absent.c', entry='f')\n", "source"),
    "unknown parent": ("import mmsuite\nmmsuite.register(id='mine.p', backend='python', "
                       "function=print, parent='cuda.99_nothing')\n", "unknown parent"),
    "unknown backend": ("import mmsuite\nmmsuite.register(id='mine.p', backend='vulkan', "
                        "function=print)\n", "unknown backend 'vulkan'"),
    "stray option": ("import mmsuite\nmmsuite.register(id='mine.p', backend='cpu', "
                     "source=__file__, entry='f', block=(16, 16))\n",
                     "block does not apply to cpu kernels"),
    "nothing registered": ("x = 1\n", "registered no kernel"),
}


@pytest.mark.parametrize("case", list(BAD_PLUGINS))
def test_a_bad_plugin_is_one_line_naming_it_and_exit_2_before_any_work(
        case: str, sandbox: Path, capsys: pytest.CaptureFixture) -> None:
    body, expected = BAD_PLUGINS[case]
    path = write_plugin(sandbox, body)
    code, out, err = run_cli("run", "--plugin", str(path), "--kernel", "cpu.seq_naive",
                             "--shape", "8", capsys=capsys)
    assert code == 2, err
    assert out == "" and err.count("\n") == 1, err
    assert err.startswith(f"mmsuite: error: plugin {path}") and expected in err, err


def test_two_plugins_declaring_one_id_clash_naming_the_first(
        sandbox: Path, capsys: pytest.CaptureFixture) -> None:
    body = NUMPY_GEMM + 'mmsuite.register(id="mine.numpy", backend="python", function=gemm)\n'
    first, second = write_plugin(sandbox, body, "a.py"), write_plugin(sandbox, body, "b.py")
    code, _, err = run_cli("list", "--plugin", str(first), "--plugin", str(second),
                           capsys=capsys)
    assert code == 2 and f"plugin {second}" in err and f"is taken (by {first})" in err


def test_a_missing_plugin_file_is_one_line(sandbox: Path, capsys: pytest.CaptureFixture) -> None:
    code, _, err = run_cli("list", "--plugin", str(sandbox / "nope.py"), capsys=capsys)
    assert code == 2 and "nope.py: no such file" in err and err.count("\n") == 1


# ------------------------------------------------------------------ end to end
def test_run_measures_plugin_kernels_beside_their_parents_and_a_wrong_one_fails_alone(
        sandbox: Path, capsys: pytest.CaptureFixture) -> None:
    path = write_plugin(sandbox, NUMPY_GEMM + """\
mmsuite.register(id="mine.numpy", backend="python", function=gemm, parent="cpu.seq_ikj")
mmsuite.register(id="mine.c", backend="cpu", source="k.c", entry="mine_gemm",
                 parent="mine.numpy")

def wrong(alpha, a, b, beta, c):
    c[...] = 0.0

mmsuite.register(id="mine.wrong", backend="python", function=wrong, parent="cpu.seq_naive")
""", k_dot_c=GOOD_C)
    out_file = sandbox / "results.json"
    code, out, err = run_cli("run", "--plugin", str(path), "--kernel", "mine.*", "--shape",
                             "35x79x19", "--json", str(out_file), capsys=capsys)
    records = {r["kernel"]: r for r in mmsuite.results.load(out_file)["results"]}
    assert code == 1  # a kernel failed
    # The parents came along, so that each plugin row has its x parent.
    assert {"cpu.seq_ikj", "cpu.seq_naive", "mine.numpy", "mine.c", "mine.wrong"} <= set(records)
    assert records["mine.wrong"]["status"] == "failed"
    assert all(records[k]["status"] == "ok" for k in records if k != "mine.wrong"), records
    assert os.environ[plugins.ENV_VAR] == str(path)  # what the host worker loaded


def test_a_crashing_c_plugin_costs_its_row_only(sandbox: Path,
                                                capsys: pytest.CaptureFixture) -> None:
    path = write_plugin(sandbox, """\
        import mmsuite
        mmsuite.register(id="mine.crash", backend="cpu", source="k.c", entry="mine_gemm")
        mmsuite.register(id="mine.good", backend="cpu", source="g.c", entry="mine_gemm")
        """, k_dot_c="#include \"mm.h\"\nvoid mine_gemm(MM_ARGS) { *(volatile int *)0 = 1; }\n",
        g_dot_c=GOOD_C)
    out_file = sandbox / "results.json"
    code, _, _ = run_cli("run", "--plugin", str(path), "--kernel", "mine.*", "--shape", "16",
                         "--json", str(out_file), capsys=capsys)
    records = {r["kernel"]: r for r in mmsuite.results.load(out_file)["results"]}
    assert code == 1
    assert records["mine.crash"]["status"] == "crashed"
    assert records["mine.good"]["status"] == "ok"


def test_the_example_plugin_runs_end_to_end_from_its_file(
        sandbox: Path, capsys: pytest.CaptureFixture) -> None:
    out_file = sandbox / "results.json"
    code, out, err = run_cli("run", "--plugin", str(EXAMPLE_FILE), "--kernel", "example.*",
                             "--shape", "96x80x72", "--json", str(out_file), capsys=capsys)
    records = {r["kernel"]: r for r in mmsuite.results.load(out_file)["results"]}
    assert code == 0, err
    for kernel_id in ("example.c_ikj_omp", "example.numpy"):
        assert records[kernel_id]["status"] == "ok"
        assert records[mmsuite.get(kernel_id).parent]["status"] == "ok"  # its parent came too
    expected_cl = "ok" if mmsuite.get("opencl.naive").available else "unavailable"
    assert records["example.cl_tiled"]["status"] == expected_cl
    assert records["example.cu_reg4x4"]["status"] in ("ok", "unavailable")


def test_an_installed_plugin_is_found_through_its_entry_point(tmp_path: Path) -> None:
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                    "--no-build-isolation", "--target", str(target), str(EXAMPLE)],
                   check=True, capture_output=True, cwd=tmp_path)
    path = os.pathsep.join(filter(None, [str(target), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path, "XDG_CACHE_HOME": str(tmp_path / "cache"),
           "COLUMNS": "200"}
    env.pop(plugins.ENV_VAR, None)
    listed = subprocess.run([sys.executable, "-m", "mmsuite.cli", "list"], env=env,
                            capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert listed.returncode == 0, listed.stderr
    assert "example.c_ikj_omp" in listed.stdout
    assert "[entry point example] rows of C shared" in listed.stdout


# ------------------------------------------------------------------ gating the user's repo
SLOW_C = GOOD_C.replace("void mine_gemm(MM_ARGS) {", """\
void mine_gemm_once(MM_ARGS);
void mine_gemm(MM_ARGS) {
    mine_gemm_once(m, n, k, batch, alpha, a, b, beta, c); /* the same work twice */
    mine_gemm_once(m, n, k, batch, alpha, a, b, beta, c);
}
void mine_gemm_once(MM_ARGS) {""")


def test_continuous_gates_the_users_plugin_repository(sandbox: Path,
                                                      capsys: pytest.CaptureFixture) -> None:
    """BASE and HEAD of the user's repository, this mmsuite fixed: the untouched kernel is
    identical code, the one made to do its work twice is slower."""
    repo = sandbox / "repo"
    repo.mkdir()

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
                        *args], check=True, capture_output=True)

    (repo / "kernels.py").write_text(
        'import mmsuite\n'
        'mmsuite.register(id="mine.steady", backend="cpu", source="steady.c", '
        'entry="mine_gemm")\n'
        'mmsuite.register(id="mine.changed", backend="cpu", source="changed.c", '
        'entry="mine_gemm")\n')
    (repo / "steady.c").write_text(GOOD_C)
    (repo / "changed.c").write_text(GOOD_C)
    git("init", "-q")
    git("add", "-A")
    git("commit", "-qm", "base")
    (repo / "changed.c").write_text(SLOW_C)
    git("commit", "-qam", "twice the work")
    verdict_file = sandbox / "verdicts.json"
    code = main_in(sandbox, "continuous", "HEAD~1", "HEAD", "--repo", str(repo), "--plugin",
                   "kernels.py", "--kernel", "mine.*", "--shape", "64", "--max-time", "6",
                   "--cache-dir", str(sandbox / "builds"), "--verdict-json", str(verdict_file))
    captured = capsys.readouterr()
    import json

    rows = {r["kernel"]: r for r in json.loads(verdict_file.read_text())["rows"]}
    assert code == 1, captured.err  # a slower row fails the gate
    assert rows["mine.steady"]["verdict"] == "same"
    assert rows["mine.steady"]["reason"].startswith("identical code")
    assert rows["mine.changed"]["verdict"] == "slower", rows["mine.changed"]


def main_in(folder: Path, *args: str) -> int:
    """The command line run from ``folder`` (a user's working directory)."""
    here = Path.cwd()
    os.chdir(folder)
    try:
        return cli.main(list(args))
    finally:
        os.chdir(here)


# ------------------------------------------------------------------ the agreement entry
def test_the_agreement_suite_passes_a_right_kernel_and_fails_a_wrong_one(sandbox: Path) -> None:
    right = write_plugin(sandbox, NUMPY_GEMM + 'mmsuite.register(id="mine.numpy", '
                         'backend="python", function=gemm)\n', name="right.py")
    wrong = write_plugin(sandbox, NUMPY_GEMM.replace("product = helper(a, b)",
                                                     "product = helper(a, b) + 1e-3")
                         + 'mmsuite.register(id="mine.wrong", backend="python", '
                         'function=gemm)\n', name="wrong.py")
    env = {k: v for k, v in os.environ.items() if k != plugins.ENV_VAR}

    def suite(path: Path) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "pytest", "--pyargs", "mmsuite.testing",
                               "--mmsuite-plugin", str(path), "-q", "-p", "no:cacheprovider"],
                              capture_output=True, text=True, cwd=sandbox, env=env, timeout=300)

    passed, failed = suite(right), suite(wrong)
    assert passed.returncode == 0, passed.stdout[-2000:]
    assert " passed" in passed.stdout and "failed" not in passed.stdout
    assert failed.returncode == 1 and "mine.wrong" in failed.stdout
    assert "failed verification" in failed.stdout or "exceeds" in failed.stdout


def test_the_asv_suites_discover_plugin_kernels(sandbox: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(plugins.ENV_VAR, str(EXAMPLE_FILE))
    sys.path.insert(0, str(REPO))
    try:
        from benchmarks import _suite
    finally:
        sys.path.remove(str(REPO))
    kernel_ids, sizes = _suite.params("cpu")
    assert {"example.c_ikj_omp", "example.numpy", "cpu.seq_naive"} <= set(kernel_ids)
    assert sizes == list(_suite.SIZES["cpu"])


def test_a_worker_without_the_plugin_makes_the_row_say_so() -> None:
    from mmsuite.backends import RunOptions
    from mmsuite.workers import measure_job

    status, reason, record = measure_job("elsewhere.kernel", mmsuite.Problem(8, 8, 8),
                                         RunOptions(), {"repeats": 1})
    assert (status, record) == ("unavailable", None)
    assert "not in this worker's catalogue" in reason and "--plugin" in reason
