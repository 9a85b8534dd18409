"""``mmsuite tune KERNEL --shape MxNxK ...``: search a dispatching rung's parameters on this GPU.

For each problem the search runs in three steps:

1. Candidates. Every tile config of the search space (``dispatch.SEARCH``:
   tile M/N/K, outputs per thread, warp layout, stages, launch bounds) with
   every split factor that leaves no K slice empty is ranked by the
   dispatcher's model; the best ``--candidates`` of them (two split factors
   per config at most), the heuristic's own choice always among them, are
   searched.
2. Kernel Tuner (the optional extra ``tune``) compiles, verifies and times
   each candidate's main kernel, one ``tune_kernel`` call per candidate, so
   that a compiler error ends only that candidate (the split factor is a
   kernel argument, the rest are its -D defines). Every candidate is
   verified: the output (C, or the partial sums of every slice added up)
   must match a float64 reference within the suite's tolerance. A candidate
   that fails to compile, launch or verify is skipped, and its reason is
   printed. Kernel Tuner's cache files (one per problem and split factor,
   beside the tuning file) make a re-run resume where the last one stopped.
3. Confirmation. Kernel Tuner's timer includes host dispatch and leaves out
   the reduction kernel, so the best few candidates, and the heuristic's
   choice, are measured again with the suite's own timer (``mmsuite.run`` on
   the rung, whole plan per sample, the host's dispatch outside the events).
   So are rung 23's stream-K variants that the model ranks best, which
   Kernel Tuner does not time (its check knows the split-K kernel only), and
   candidates whose shared buffers pass 48 KB, which its CuPy backend cannot
   launch (it never raises the kernel's dynamic shared memory limit).
   The fastest becomes the problem's entry in the device's tuning file, which
   the rung reads from then on (``mmsuite.dispatch``); when the heuristic's
   own plan is fastest, the problem gets no entry.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import dispatch
from .dispatch import Choice, Config, Device

#: Rungs the command tunes, and the configs each may use (None: any). Rung 21 keeps
#: the heuristic's split factor, so the tuning file holds rung 22's choices only.
TUNABLE: dict[str, list[Config] | None] = {"cuda.22_adaptive": None}
DEFAULT_CANDIDATES = 16
DEFAULT_CONFIRM = 3
DEFAULT_STREAMK = 2  # stream-K variants confirmed per problem, beyond the split-K candidates
#: Kernel Tuner's order of the parameters (its cache files are keyed by it).
PARAM_ORDER = ("BM", "BN", "BK", "TM", "TN", "LR", "STAGES", "MINB", "block_size_x")
#: Argument positions of mm_21_splitk (M, N, K, alpha, A, B, beta, C, W, splits).
C_ARG, W_ARG = 7, 8


class TuneError(ValueError):
    """Bad input to ``mmsuite tune``: reported in one line, exit status 2."""


@dataclass
class Outcome:
    """One candidate's fate in the search."""

    choice: Choice
    kernel_tuner_ms: float | None = None
    confirmed_ms: float | None = None
    skipped: str = ""  # why it was skipped, empty when it ran and verified


# --------------------------------------------------------------- candidates
def search_space(configs: list[Config] | None = None) -> list[Config]:
    """The tile configs searched: the dispatcher's and the variants only a tuner tries."""
    return list(configs) if configs is not None else list(dispatch.SEARCH)


def candidates(m: int, n: int, k: int, batch: int, device: Device,
               configs: list[Config] | None = None,
               limit: int = DEFAULT_CANDIDATES) -> list[Choice]:
    """The ``limit`` (config, split) pairs the model ranks best, the heuristic's among them.

    At most two split factors per config, so that the search sees many tile shapes.
    """
    ranked = []
    for config in search_space(configs):
        per_config = sorted(
            (dispatch.estimate_seconds(config, split, m, n, k, batch, device), split)
            for split in dispatch._splits(k, config.bk)
            if dispatch.fits(config, split, m, n, batch))
        ranked += [(seconds, config.name, Choice(config, split, estimate_ms=seconds * 1e3))
                   for seconds, split in per_config[:2]]
    ranked.sort(key=lambda item: (item[0], item[1]))
    chosen = [choice for _, _, choice in ranked[:max(1, limit)]]
    heuristic = dispatch.heuristic(m, n, k, batch, device, configs)
    if all((c.config, c.split) != (heuristic.config, heuristic.split) for c in chosen):
        chosen[-1:] = [heuristic] if len(chosen) >= limit else chosen[-1:] + [heuristic]
    return chosen


def streamk_candidates(m: int, n: int, k: int, batch: int, device: Device,
                       limit: int = DEFAULT_STREAMK) -> list[Choice]:
    """Rung 23's stream-K variants the model ranks best for the problem, where stream-K
    shares any tile (it does not when the tiles fill whole waves). Kernel Tuner does not
    time these (its check knows the split-K kernel only): the suite's run confirms them."""
    ranked = []
    for config in dispatch.STREAMK_CONFIGS:
        try:
            split = dispatch.streamk_split(config, m, n, k, batch, device)
        except ValueError:  # more iterations than the kernels count
            continue
        if split.sk_ctas:
            seconds = dispatch.estimate_streamk_seconds(split, m, n, k, batch, device)
            ranked.append((seconds, config.name,
                           Choice(config, 1, estimate_ms=seconds * 1e3, streamk=True)))
    ranked.sort(key=lambda item: (item[0], item[1]))
    return [choice for _, _, choice in ranked[:max(0, limit)]]


def kernel_tuner_params(choices: list[Choice]) -> tuple[dict[str, list[int]], Callable]:
    """Kernel Tuner's ``tune_params`` and a restriction admitting exactly ``choices``' configs."""
    wanted = {tuple(_params(c.config)[name] for name in PARAM_ORDER) for c in choices}
    tune_params = {name: sorted({key[i] for key in wanted}) for i, name in enumerate(PARAM_ORDER)}

    def restrict(p: dict) -> bool:
        return tuple(p[name] for name in PARAM_ORDER) in wanted

    return tune_params, restrict


def _params(config: Config) -> dict[str, int]:
    return {**config.params(), "block_size_x": config.threads}


def config_of(params: dict) -> Config:
    """The config a Kernel Tuner result row names."""
    return Config.from_params({name: int(params[name]) for name in PARAM_ORDER[:-1]})


# ------------------------------------------------------------- verification
class Verifier:
    """Kernel Tuner's ``verify`` for mm_21_splitk, and an observer that records its verdicts.

    With one slice the answer is C. With several, C stays NaN and the workspace
    holds the slices' partial sums; Kernel Tuner refills the workspace with
    zeros before the checked run, so the sum of all its slices is the product.
    Kernel Tuner stops the whole search on a failed check, so ``verify`` always
    passes and hands its verdict to ``get_results``, which files it with the
    candidate's row; failures are skipped afterwards with the reason.
    """

    def __init__(self, reference: np.ndarray, batch: int, k: int) -> None:
        from .verify import tolerance

        self.reference = reference.reshape(batch, -1)
        self.batch = batch
        self.tolerance = tolerance(k)
        self.last: dict = {}

    def verdict(self, c: np.ndarray, w: np.ndarray) -> dict:
        """{'verified': 0 or 1, 'rel_err': worst matrix's relative error (inf for NaN)}."""
        c = np.asarray(c, dtype=np.float64).reshape(self.batch, -1)
        w = np.asarray(w, dtype=np.float64)
        if np.isnan(c).all() and w.size >= c.size:  # split: the product is in the workspace
            c = w.reshape(self.batch, -1, c.shape[1]).sum(axis=1)
        if not np.isfinite(c).all():
            return {"verified": 0, "rel_err": math.inf}
        diff = np.linalg.norm(c - self.reference, axis=1)
        scale = np.maximum(np.linalg.norm(self.reference, axis=1), np.finfo(np.float64).tiny)
        err = float((diff / scale).max())
        return {"verified": int(err <= self.tolerance), "rel_err": err}

    def verify(self, answer: list, result_host: list, atol: float | None = None) -> bool:
        self.last = self.verdict(result_host[C_ARG], result_host[W_ARG])
        return True

    def observer(self):
        """A Kernel Tuner benchmark observer that adds the last verdict to the candidate's row."""
        from kernel_tuner.observers.observer import BenchmarkObserver

        verifier = self

        class VerdictObserver(BenchmarkObserver):
            def get_results(self) -> dict:
                out, verifier.last = verifier.last or {"verified": 0, "rel_err": math.nan}, {}
                return dict(out)

        return VerdictObserver()


def skip_reason(row: dict, tol: float) -> str:
    """Why a Kernel Tuner result row is not a usable candidate ('' when it is)."""
    time_ms = row.get("time")
    error = row.get("__error__")
    if error is not None or not isinstance(time_ms, (int, float)) or not math.isfinite(time_ms):
        what = str(error if error is not None else time_ms)
        if "Compil" in what:
            return f"failed to compile ({what})"
        if "Runtime" in what:
            return f"failed to launch or run ({what})"
        if "Invalid" in what:
            return f"invalid launch configuration ({what})"
        return f"no time ({what})"
    if int(row.get("verified", 0)) != 1:
        err = row.get("rel_err", math.nan)
        return f"failed verification (relative error {err:.3g}, tolerance {tol:.3g})"
    return ""


# --------------------------------------------------------------- the search
def column_major_product(a: np.ndarray, b: np.ndarray, m: int, n: int, k: int,
                         batch: int) -> np.ndarray:
    """C = A B in float64 for column-major storage, on the GPU when CuPy has one."""
    try:
        import cupy as xp

        xp.cuda.runtime.getDeviceCount()
    except Exception:  # no CuPy or no GPU: the host computes it
        xp = np
    da = xp.asarray(a, dtype=xp.float64).reshape(batch, k, m).transpose(0, 2, 1)
    db = xp.asarray(b, dtype=xp.float64).reshape(batch, n, k).transpose(0, 2, 1)
    c = (da @ db).transpose(0, 2, 1).reshape(-1)
    out = c.get() if hasattr(c, "get") else np.asarray(c)
    if xp is not np:
        del da, db, c
        xp.get_default_memory_pool().free_all_blocks()
    return out


def _kernel_tuner():
    try:
        import kernel_tuner
    except ImportError as exc:
        raise TuneError("`mmsuite tune` needs Kernel Tuner: pip install 'mmsuite[tune]' "
                        f"({exc})") from None
    return kernel_tuner


def cache_path(device_name: str, key: str, split: int) -> Path:
    """Kernel Tuner's cache file of one problem and split factor (beside the tuning file)."""
    return (dispatch.tuning_dir() / "kernel_tuner" / dispatch.device_slug(device_name)
            / f"{key}-split{split}.json")


def run_kernel_tuner(choices: list[Choice], m: int, n: int, k: int, batch: int,
                     device: Device, progress: Callable[[str], None],
                     iterations: int = 7) -> list[Outcome]:
    """Compile, verify and time every candidate's main kernel with Kernel Tuner."""
    kt = _kernel_tuner()
    from .sources import read_source

    rng = np.random.default_rng(20261123)
    a = rng.standard_normal(batch * m * k, dtype=np.float32)
    b = rng.standard_normal(batch * k * n, dtype=np.float32)
    verifier = Verifier(column_major_product(a, b, m, n, k, batch), batch, k)
    code = read_source(dispatch.SOURCE)
    key = dispatch.shape_key(m, n, k, batch)
    outcomes = []
    for split in sorted({c.split for c in choices}):
        group = [c for c in choices if c.split == split]
        tune_params, _ = kernel_tuner_params(group)  # one key set per cache file
        poison = np.full(batch * m * n, np.nan, dtype=np.float32)
        work = np.zeros(max(1, batch * split * m * n if split > 1 else 1), dtype=np.float32)
        args = [np.int32(m), np.int32(n), np.int32(k), np.float32(1.0), a, b, np.float32(0.0),
                poison, work, np.int32(split)]
        answer = [None] * len(args)
        answer[C_ARG], answer[W_ARG] = poison, work  # refilled before each checked run
        cache = cache_path(device.name, key, split)
        cache.parent.mkdir(parents=True, exist_ok=True)
        for choice in group:
            # One call per candidate: Kernel Tuner ends a whole search on a compile error.
            _, restrict = kernel_tuner_params([choice])
            label = f"[{len(outcomes) + 1}/{len(choices)}] {choice.config.name} split {split}"
            try:
                with contextlib.redirect_stdout(io.StringIO()):  # its own per-config lines
                    rows, _ = kt.tune_kernel(
                        dispatch.MAIN_ENTRY, code, (m, n, batch * split), args, tune_params,
                        grid_div_x=["BM"], grid_div_y=["BN"], grid_div_z=None,
                        restrictions=restrict, answer=answer, verify=verifier.verify,
                        lang="cupy", compiler_options=["-std=c++17"], cache=str(cache),
                        iterations=iterations, observers=[verifier.observer()],
                        strategy="brute_force", quiet=True)
            except Exception as exc:  # a compiler or launch error of this candidate only
                text = (str(getattr(exc, "stderr", "") or exc).strip().splitlines() or ["?"])[0]
                reason = f"failed to compile or run: {type(exc).__name__}: {text[:200]}"
                outcomes.append(Outcome(choice, skipped=reason))
                progress(f"{label}: skipped: {reason}")
                continue
            row = next((r for r in rows if config_of(r) == choice.config), None)
            if row is None:
                reason = "not evaluated by Kernel Tuner (outside its search space)"
            else:
                reason = skip_reason(row, verifier.tolerance)
            time_ms = float(row["time"]) if not reason else None
            outcomes.append(Outcome(choice, kernel_tuner_ms=time_ms, skipped=reason))
            progress(f"{label}: " + (f"skipped: {reason}" if reason
                                     else f"{time_ms:.4f} ms (Kernel Tuner), verified"))
    return outcomes


@contextlib.contextmanager
def _only_entry(device_name: str, key: str, choice: Choice | None) -> Iterator[None]:
    """A private tuning folder holding just ``choice`` for ``key`` (none: the heuristic)."""
    saved = {name: os.environ.get(name) for name in (dispatch.TUNING_ENV, dispatch.BUNDLED_ENV)}
    with tempfile.TemporaryDirectory(prefix="mmsuite-tune-") as folder:
        os.environ[dispatch.TUNING_ENV] = folder
        os.environ[dispatch.BUNDLED_ENV] = "0"  # the heuristic itself, not a shipped entry
        try:
            if choice is not None:
                dispatch.store_tuning(dispatch.tuning_path(device_name), device_name,
                                      {key: entry_of(choice)})
            yield
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


def entry_of(choice: Choice, **extra) -> dict:
    """A tuning-file entry for a choice."""
    streamk = {"streamk": True} if choice.streamk else {}
    return {"params": choice.config.params(), "config": choice.config.name,
            "split": choice.split, **streamk, **extra}


def plan_label(config: str, split, streamk: bool = False) -> str:
    """How a plan is named in progress lines and in the tuning file's skips."""
    return f"{config}/stream-K" if streamk else f"{config}/{split}"


def label_of(choice: Choice) -> str:
    return plan_label(choice.config.name, choice.split, choice.streamk)


def plan_words(plan: dict) -> str:
    """A tuning entry's plan (or its ``heuristic`` record) for the table."""
    if plan.get("streamk"):
        return f"stream-K {plan['config']}"
    return f"{plan['config']} split {plan['split']}"


def confirm(kernel_id: str, problem, device_name: str, key: str,
            choice: Choice | None) -> tuple[float, dict]:
    """(median ms, dispatch info) of the rung on ``problem`` with ``choice`` forced, by the
    suite's own timer; raises RuntimeError when the rung fails verification."""
    from .measure import Sampling, run

    sampling = Sampling(min_samples=10, min_seconds=0.2, max_seconds=3.0, name="tune")
    with _only_entry(device_name, key, choice):
        measurement = run(kernel_id, problem, sampling=sampling)
    if not measurement.ok:
        raise RuntimeError(f"{kernel_id} failed verification: {measurement.verdict.reason}")
    return float(measurement.kernel_ms.median), dict(measurement.info.get("dispatch", {}))


def kernel_dims(problem) -> tuple[int, int, int, int]:
    """The column-major sizes the rung sees for a problem (row-major problems swap M and N)."""
    if problem.layout == "row":
        return problem.n, problem.m, problem.k, problem.batch
    return problem.m, problem.n, problem.k, problem.batch


def tune_problem(kernel_id: str, problem, device: Device, limit: int, confirm_top: int,
                 progress: Callable[[str], None], streamk_limit: int = DEFAULT_STREAMK) -> dict:
    """Search, confirm and store one problem's entry; returns what was stored."""
    m, n, k, batch = kernel_dims(problem)
    key = dispatch.shape_key(m, n, k, batch)
    configs = TUNABLE[kernel_id]
    found = candidates(m, n, k, batch, device, configs, limit)
    # Kernel Tuner's CuPy backend launches with the default 48 KB cap on dynamic shared
    # memory, so tiles with larger buffers go straight to the suite's timer, as stream-K does.
    choices = [c for c in found if not c.config.smem_dynamic]
    direct = [c for c in found if c.config.smem_dynamic]
    streamk = (streamk_candidates(m, n, k, batch, device, streamk_limit)
               if configs is None else [])
    for_suite = [f"{len(direct)} with over 48 KB of shared memory"] if direct else []
    for_suite += [f"{len(streamk)} stream-K variants"] if streamk else []
    progress(f"{len(choices)} candidates for the kernel's {m}x{n}x{k} (batch {batch})"
             + (f", and {' and '.join(for_suite)} for the suite's run" if for_suite else ""))
    started = time.perf_counter()
    outcomes = run_kernel_tuner(choices, m, n, k, batch, device, progress) if choices else []
    good = [o for o in outcomes if not o.skipped]
    skipped = [o for o in outcomes if o.skipped]
    if not good and not direct:  # every compiled candidate failed: something is broken
        raise RuntimeError(f"every candidate for {key} was skipped: "
                           + "; ".join(f"{label_of(o.choice)}: {o.skipped}" for o in skipped))

    def ranked_ms(o: Outcome) -> float:
        # Kernel Tuner timed the main kernel only: add the modelled reduction pass.
        extra = 0.0
        if o.choice.split > 1:
            extra = (4 * batch * m * n * (2 * o.choice.split + 2) / 2.5e12 + 2e-6) * 1e3
        return o.kernel_tuner_ms + extra

    good.sort(key=ranked_ms)
    to_confirm = (good[:max(1, confirm_top)] + [Outcome(choice) for choice in direct]
                  + [Outcome(choice) for choice in streamk])
    heuristic_ms, heuristic_info = confirm(kernel_id, problem, device.name, key, None)
    heuristic_name = plan_label(heuristic_info.get("config"), heuristic_info.get("split"),
                                heuristic_info.get("streamk", False))
    progress(f"heuristic {heuristic_name}: {heuristic_ms:.4f} ms (suite timer)")
    for outcome in to_confirm:
        name = label_of(outcome.choice)
        try:
            outcome.confirmed_ms, _ = confirm(kernel_id, problem, device.name, key,
                                              outcome.choice)
        except RuntimeError as exc:  # failed the suite's verification: skipped, with why
            outcome.skipped = f"suite run: {exc}"
            skipped.append(outcome)
            progress(f"skipped {name}: {outcome.skipped}")
            continue
        progress(f"confirmed {name}: {outcome.confirmed_ms:.4f} ms (suite timer)")
    confirmed = [o for o in to_confirm if o.confirmed_ms is not None]
    if not confirmed:
        raise RuntimeError(f"no candidate for {key} passed the suite's run")
    best = min(confirmed, key=lambda o: o.confirmed_ms)
    flops = 2.0 * m * n * k * batch
    # The tuned entry is never slower than no entry. When the heuristic's own plan wins
    # (it may be the model's stream-K plan), the file keeps no entry for this problem,
    # so the rung goes on choosing as the heuristic does.
    heuristic_wins = heuristic_ms < best.confirmed_ms
    if heuristic_wins:
        winner = dispatch.heuristic(m, n, k, batch, device, configs)
        winner_ms = heuristic_ms
    else:
        winner, winner_ms = best.choice, best.confirmed_ms
    entry = entry_of(
        winner, confirmed_ms=round(winner_ms, 5),
        confirmed_tflops=round(flops / winner_ms / 1e9, 2),
        heuristic={"config": heuristic_info.get("config"),
                   "split": heuristic_info.get("split"), "ms": round(heuristic_ms, 5),
                   **({"streamk": True} if heuristic_info.get("streamk") else {})},
        kept_heuristic=heuristic_wins,
        kernel_tuner_ms=best.kernel_tuner_ms, kernel=kernel_id,
        candidates=len(outcomes) + len(direct) + len(streamk),
        skipped={label_of(o.choice): o.skipped for o in skipped},
        tuned_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        search_seconds=round(time.perf_counter() - started, 1))
    path = dispatch.tuning_path(device.name)
    dispatch.store_tuning(path, device.name, {key: None if heuristic_wins else entry})
    return {"key": key, "entry": entry, "path": str(path), "outcomes": outcomes}


def current_device() -> Device:
    """The model's view of the current CUDA device."""
    import cupy as cp

    runtime = cp.cuda.runtime
    dev = cp.cuda.Device()
    props = runtime.getDeviceProperties(dev.id)
    name = props.get("name", b"?")
    name = name.decode() if isinstance(name, bytes) else str(name)
    clock = runtime.deviceGetAttribute(13, dev.id) // 1000  # cudaDevAttrClockRate, kHz
    return Device(name, int(props.get("multiProcessorCount", dispatch.DEFAULT_SMS)),
                  int(clock or dispatch.DEFAULT_CLOCK_MHZ))
