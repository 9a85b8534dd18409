"""Time the tiles of rungs 21, 23 and 27 on products whose M is not a multiple of 4, and fit
the cost model's store share for rung 21's tiles there.

    python scripts/tile_calibration.py measure --out timings.json [--set moderate] [--seed N]
    python scripts/tile_calibration.py measure --out timings.json --shapes 13780x234x79 ...
    python scripts/tile_calibration.py fit timings.json ... [--check held.json ...] [--latency]
    python scripts/tile_calibration.py fit timings.json ... --gemv
    python scripts/tile_calibration.py fit timings.json ... --epilogue
    python scripts/tile_calibration.py fit timings.json ... --tiles
    python scripts/tile_calibration.py fit timings.json ... --broad
    python scripts/tile_calibration.py fit timings.json ... --gemv-m
    python scripts/tile_calibration.py fit timings.json ... --gemv-n
    python scripts/tile_calibration.py fit timings.json ... --gemv-narrow
    python scripts/tile_calibration.py fit timings.json ... --sums

``measure`` (on a GPU) verifies and times, per problem, the model's eight best plans and
every split-K, stream-K, short-K and GEMV variant at the split the model likes best for it, then
rung 22's own plan and cuBLAS, by the suite's timer. The problems are drawn from
``--seed`` (``--set``: ``moderate``, M and N log-uniform in [200, 16384] with M x N at least
2^20 and K log-uniform in [24, 320]; ``short``, the same with K in [4, 64]; ``long``, M x N
in [2^16, 2^22] and K in [1000, 8000]; ``skinny``, N in [1, 16], M in [1000, 16384] and K
in [2000, 16384], M x N x K at least 2^28 so that rung 24 streams A at the memory's rate;
``narrow``, N in [1, 16], M and K in [200, 16384]; ``tiny``, N in [1, 16], M in [100, 8192],
K in [16, 2048] and M x N x K at most 2^26 (where a launch's latency outweighs its bytes),
M and N swapped in half of them;
``mid``, M and N log-uniform in [16, 16384] with M x N in [2^14, 2^20] and K
log-uniform in [150, 1500] (where a few hundred tiles or fewer meet a K of hundreds);
``skinny_m``, the skinny set with M and N swapped (B streamed by rung 24's M-side kernel);
``rows``, N in [1, 4], M in [64, 16384] and K in [500, 16384] with M x K at most 2^27, M and
N swapped in half of them (each output a dot product of hundreds to thousands of terms);
``batched``, the judge's batched draws (batch 2-64, M, N and K log-uniform in [1, 16384],
M x N x K x batch at most 2^35);
``small``, M, N and K log-uniform in [1, 4096] with M x N x K at most 2^24 (where a launch's
latency and a block's are most of the time); ``few``, M and N in [16, 512] with M x N
at most 2^15 and K in [1000, 16384]; ``slim``, one of M and N in [12, 128], the other in
[1000, 16384], K in [300, 16384], M x N x K at most 2^34; three in four with the kernel's M
not a multiple of 4),
or given as row-major ``MxNxK`` with ``--shapes``. The fitted seeds are 2323 (moderate),
2325 (short), 2327 (long), 2329 (skinny), 2341 and 2371 (narrow), 2343 and 2365 (few), 2361
and 2363 (slim), 2381 (tiny), 2391 (small) and 2395 (mid), and for the broad refit also
2324 and 2326, 2382, 2392, 2396, 2401 and 2402 (skinny_m) and 2411-2415 (batched); none of
their shapes is in a judge seed's draw. Other seeds give shapes to check a fit on (the
pipelined refit was checked on skinny_m 2403, batched 2416 and rows 2421 and 2422).
``--splits N`` also times rung 24's variants at every split and the small tiles at the N
splits the model ranks best for each (the waves of blocks a split makes).

``fit`` refits, on those timings, the share of the store rate that rung 21's tiles reach
where M is not a multiple of 4 (``staged_store``: C through shared memory) and the plain
tiles' unaligned shares, or with ``--latency`` the block latency of the largest tiles, or
with ``--gemv`` the unaligned shares of rung 24's N-side variants (A streamed, M not a
multiple of 4), or with ``--epilogue`` the SM's time per output of rung 21's staged store
(``staged_epilogue_s``) and rung 27's store shares, on the timings with K of
``model.STORE_BOUND_K`` or less (where C's stores are most of the time), or with
``--tiles`` the split-K and stream-K tiles' rates and block latencies and their shared terms,
or with ``--broad`` the rates and round times of rung 24's M-side variants of 1, 2 and 8
rows, its time per wave and rung 30's terms, or with ``--gemv-m`` the rates, round times
and unaligned shares of every M-side variant of rung 24 and the M side's wave time,
blocks-per-SM need, SM crowding and the bend of its fill, or with ``--gemv-n`` the same of
every N-side variant (but the blocks-per-SM need, which rung 30 shares), or with
``--gemv-narrow`` the rates, round times and unaligned shares of the N side's 32- and 64-row
blocks alone, or with ``--sums`` the slice sums' figures (one reduction block's rate, the
second launch's gap, a fused tail's fixed and per-slice waits), every other figure held at
the device's model file, and writes them there; it prints the error of the times and
how the model ranks the measured plans, before and after, on the fitted timings and on those
given with ``--check``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from mmsuite.cuda_dispatch import costs, model
from mmsuite.cuda_dispatch.families.gemv import GemvConfig
from mmsuite.cuda_dispatch.families.splitk import Config
from mmsuite.cuda_dispatch.family import Candidate
from mmsuite.cuda_dispatch.variants import BY_KEY, VARIANTS, candidates
from mmsuite.launch import H100_SXM
from mmsuite.tuner import log_uniform

SEEDS = {"moderate": 2323, "short": 2325, "long": 2327, "skinny": 2329, "narrow": 2341,
         "few": 2343, "slim": 2361, "tiny": 2381, "small": 2391, "mid": 2395,
         "skinny_m": 2401, "batched": 2411, "rows": 2421}
#: The model's terms these timings inform: rung 21's staged store share and its plain tiles'
#: unaligned shares (fitted before with C's scalar stores beside them; rung 23's tiles store
#: scalars still, and these timings would charge that to their loads; the fused tiles'
#: stores of C are scalar too).
FREE = [("shared", "staged_store")] + [
    ("unaligned", v.key) for v in VARIANTS
    if v.family == "splitk" and isinstance(v.config, Config) and not v.config.fused]
#: ``fit --latency`` frees instead the block latency of rung 21's largest tiles, whose one
#: or two blocks an SM with few K tiles the model had over-preferred for short K (the
#: 256x128 tiles with BK 8 had a latency of their own fitted, 19 us, and are held).
LATENCY = [("latency", f"splitk:{name}") for name in (
    "256x128x16_t8x8_lr2", "256x128x16", "128x256x16", "128x256x8_s2", "512x64x16_t8x8_lr8")]


def _rung_24(side: str) -> dict[str, int]:
    """Rung 24's variants of ``side`` ("n": A streamed, "m": B streamed), each with the
    columns of B or rows of A it holds."""
    return {v.key: v.config.skinny for v in VARIANTS
            if isinstance(v.config, GemvConfig) and v.config.side == side}


N_SIDE, M_SIDE = _rung_24("n"), _rung_24("m")
#: A rung 24 variant's own figures: its rate, its round's time and its unaligned share.
VARIANT_FIGURES = ("efficiency", "latency", "unaligned")
#: ``fit --gemv`` frees the unaligned shares of rung 24's N-side variants, which read A's
#: columns in scalar loads where M is not a multiple of 4 (coalesced since the lanes' rows
#: are spread 32 apart; fitted before at the bound, 0.3, when a warp's loads were strided).
GEMV_N = [("unaligned", key) for key in N_SIDE]
#: ``fit --tiles`` frees the split-K and stream-K tiles' rates and block latencies and the
#: shared terms of their waves, slices and fix-ups (``calibration.mid_refit``, fitted on the
#: mid set with the earlier draws). The plain 32x32 tile is held: freed, it took short-K
#: products such as 3244x65x2 from rung 27, which the H100 ran faster.
TILES = [("shared", name) for name in ("tile_round_s", "fuse_bytes_per_thread_s",
                                       "reduce_bytes_per_s", "streamk_fixup_factor",
                                       "fill_exponent")] + [
    (table, v.key) for v in VARIANTS
    if v.family in ("splitk", "streamk") and v.key != "splitk:32x32x16_t4x4_lr4"
    for table in ("efficiency", "latency")]
#: ``fit --broad`` frees the rates and round times of rung 24's M-side variants of 1, 2 and 8
#: rows and its time per wave of blocks, and rung 30's terms (``calibration.broad_refit``:
#: the judge's batched draws, and products whose skinny side is M, had been fitted on none
#: of them). The 4- and 16-row variants are held (freed, they took 8192x4x8192 and
#: 4096x16x4096 from the plans the H100 ran faster), and so are the tiles (freed with these,
#: they ranked the held-back mid and slim draws worse; the 32x128 tiles alone took
#: 4096x16x4096 to the fused 32x64 tile, slower there).
BROAD = [("shared", "gemv_wave_s")] + [
    (table, key) for key, skinny in M_SIDE.items() if skinny in (1, 2, 8)
    for table in ("efficiency", "latency")] + [
    ("shared", name) for name in ("dot_block_s", "dot_latency_s", "dot_round_s")] + [
    ("efficiency", "dot:dot_4x4")]
#: ``fit --gemv-m`` frees the rates, round times and unaligned shares of every M-side variant
#: of rung 24, its time per wave and the bend of its fill (``calibration.pipelined_refit``,
#: refitted when the M side came to keep a second round of B's loads in flight, and
#: ``calibration.fill_refit``, when its fill came to bend softly).
GEMV_M = [("shared", "gemv_m_wave_s"), ("shared", "gemv_m_sm_blocks"),
          ("shared", "gemv_m_blocks_per_sm"), ("shared", "gemv_m_fill_power")] + [
    (table, key) for key in M_SIDE for table in VARIANT_FIGURES]
#: ``fit --gemv-n`` frees the rates, round times and unaligned shares of every N-side variant
#: of rung 24, its time per wave, SM crowding and the bend of its fill
#: (``calibration.n_pipelined_refit``, refitted when the N side came to keep a second round of
#: A's loads in flight). Its blocks-per-SM need is held: rung 30 shares it.
GEMV_N_SIDE = [("shared", "gemv_wave_s"), ("shared", "gemv_sm_blocks"),
               ("shared", "gemv_fill_power")] + [
    (table, key) for key in N_SIDE for table in VARIANT_FIGURES]
#: ``fit --gemv-narrow`` frees only the rates, round times and unaligned shares of the N side's
#: 32- and 64-row blocks (``calibration.narrow_blocks``): freed with the rest of the N side, the
#: 128-row blocks' figures moved too, and their picks on the held-back N-side shapes got worse.
GEMV_NARROW = [(table, key) for key in N_SIDE if BY_KEY[key].config.narrow
               for table in VARIANT_FIGURES]
#: ``fit --epilogue`` frees the SM's time per output of rung 21's staged store of C and the
#: store shares of rung 27's tiles, the plans rung 22 weighs against them where K is short.
EPILOGUE = [("shared", "staged_epilogue_s")] + [
    ("store", f"shortk:{name}")
    for name in ("shortk_128x32_t4", "shortk_128x64_t8", "shortk_64x128_t8")]
#: ``fit --sums`` frees the figures of the slices' sums: one reduction block's rate, the second
#: launch's gap, and a fused tail's fixed and per-slice waits (``calibration.slice_loads``,
#: refitted when the slice sums came to load eight slices at once).
SUMS = [("shared", name) for name in ("reduce_bytes_per_block_s", "launch_gap_s",
                                      "gemv_fuse_s", "fuse_slice_s")]
#: ``fit``'s flags, each the figures it frees instead of FREE (at most one is given).
FREE_SETS = {"latency": LATENCY, "gemv": GEMV_N, "tiles": TILES, "broad": BROAD,
             "gemv_m": GEMV_M, "gemv_n": GEMV_N_SIDE, "gemv_narrow": GEMV_NARROW,
             "epilogue": EPILOGUE, "sums": SUMS}
#: What each of ``fit``'s flags refits, for its help.
FREE_SET_HELP = {
    "latency": "the largest tiles' block latency (LATENCY)",
    "gemv": "rung 24's N-side unaligned shares (GEMV_N)",
    "tiles": "the split-K and stream-K tiles' rates and latencies and their shared terms "
             "(TILES)",
    "broad": "rung 24's M-side and rung 30's terms (BROAD)",
    "gemv_m": "every M-side variant of rung 24 and its time per wave (GEMV_M)",
    "gemv_n": "every N-side variant of rung 24 and its time per wave (GEMV_N_SIDE)",
    "gemv_narrow": "the N side's 32- and 64-row blocks of rung 24 alone (GEMV_NARROW)",
    "epilogue": "the staged store's SM time and rung 27's store shares on the short-K "
                "timings (EPILOGUE)",
    "sums": "the slice sums' reduction rate, launch gap and fused waits (SUMS)",
}
assert FREE_SET_HELP.keys() == FREE_SETS.keys()


def calibration_shapes(kind: str, seed: int, count: int) -> list[tuple[int, int, int, int]]:
    """(m, n, k, batch), column-major, of the set ``kind`` (module docstring); three in four
    with M not a multiple of 4 (odd or 2 mod 4, in turn)."""
    rng = np.random.default_rng(seed)
    out: list[tuple[int, int, int, int]] = []
    while len(out) < count:
        if kind in ("skinny", "skinny_m"):
            m, n = log_uniform(rng, 1000, 16384), int(rng.integers(1, 17))
            k = log_uniform(rng, 2000, 16384)
            fits = m * n * k >= 2**28 and m * k <= 2**27
        elif kind == "batched":  # the judge's batched draws: batch 2-64, every side free
            batch = int(rng.integers(2, 65))
            m, n, k = (log_uniform(rng, 1, 16384) for _ in range(3))
            if m * n * k * batch <= 2**35:
                out.append((m, n, k, batch))
            continue
        elif kind == "rows":  # 1-4 rows or columns of C, each a dot product of long K
            m, n = log_uniform(rng, 64, 16384), int(rng.integers(1, 5))
            k = log_uniform(rng, 500, 16384)
            fits = m * k <= 2**27
            skinny_m = bool(rng.integers(0, 2))
        elif kind == "narrow":
            m, n = log_uniform(rng, 200, 16384), int(rng.integers(1, 17))
            k = log_uniform(rng, 200, 16384)
            fits = m * k <= 2**27
        elif kind == "tiny":  # a skinny side, the product small: latency more than bytes
            m, n = log_uniform(rng, 100, 8192), int(rng.integers(1, 17))
            k = log_uniform(rng, 16, 2048)
            fits = m * n * k <= 2**26
            skinny_m = bool(rng.integers(0, 2))  # half with M skinny: B streamed
        elif kind == "slim":  # one side of 12 to 128, the other long, K long
            m, n = log_uniform(rng, 12, 128), log_uniform(rng, 1000, 16384)
            k = log_uniform(rng, 300, 16384)
            fits = m * n * k <= 2**34
            if rng.integers(0, 2):
                m, n = n, m
        elif kind == "mid":  # C of tens to a million outputs, K in the hundreds
            m, n = log_uniform(rng, 16, 16384), log_uniform(rng, 16, 16384)
            k = log_uniform(rng, 150, 1500)
            fits = 2**14 <= m * n <= 2**20
        elif kind == "small":  # every side free, the product small: launch and latency
            m, n, k = (log_uniform(rng, 1, 4096) for _ in range(3))
            fits = m * n * k <= 2**24
        elif kind == "few":
            m, n = log_uniform(rng, 16, 512), log_uniform(rng, 16, 512)
            k = log_uniform(rng, 1000, 16384)
            fits = m * n <= 2**15
        elif kind == "long":
            m, n = log_uniform(rng, 16, 8192), log_uniform(rng, 16, 8192)
            k = log_uniform(rng, 1000, 8000)
            fits = 2**16 <= m * n <= 2**22 and m * n * k <= 2**33
        else:
            m, n = log_uniform(rng, 200, 16384), log_uniform(rng, 200, 16384)
            k = log_uniform(rng, 24, 320) if kind == "moderate" else log_uniform(rng, 4, 64)
            fits = m * n >= 2**20 and m * n * k <= 2**32
        if not fits:
            continue
        if len(out) % 4 != 3:
            m += (1, 2, 3, 0)[m % 4] if len(out) % 2 else (2, 1, 0, 3)[m % 4]
        if (kind in ("tiny", "rows") and skinny_m) or kind == "skinny_m":
            m, n = n, m
        out.append((m, n, k, 1))
    return out


def _shape(text: str) -> tuple[int, int, int, int]:
    """Row-major ``MxNxK`` or ``BxMxNxK`` (a batch of B): the kernels see N x M."""
    sizes = [int(x) for x in text.lower().split("x")]
    batch, (m, n, k) = (sizes[0], sizes[1:]) if len(sizes) == 4 else (1, sizes)
    return n, m, k, batch


def plans(m: int, n: int, k: int, batch: int, device, params,
          splits: int = 1) -> list[Candidate]:
    """The model's eight best, then each split-K, stream-K and short-K variant at the split
    the model ranks best for it, once each; with ``splits`` above 1, rung 24's variants at
    every split and rung 21's tiles of at most 64 x 64 (and the 32 x 128 tile) at the
    ``splits`` the model ranks best for each, so that the waves of blocks a split makes are
    timed too."""
    ranked = model.ranked(candidates(m, n, k, batch, device), m, n, k, batch, device, params)
    best = [c for _, c in ranked[:8]]
    per_variant: dict[str, list[Candidate]] = {}
    for _, c in ranked:
        if c.family not in ("splitk", "streamk", "shortk", "gemv"):
            continue
        taken = per_variant.setdefault(c.variant.key, [])
        small = (c.family == "splitk" and isinstance(c.config, Config)
                 and (c.config.bm * c.config.bn <= 64 * 64 or c.config.bm == 32))
        wanted = 1 if splits == 1 else 99 if c.family == "gemv" else splits if small else 1
        if len(taken) < wanted:
            taken.append(c)
    return list(dict.fromkeys(best + [c for taken in per_variant.values() for c in taken]))


def measure(shapes: list[tuple[int, int, int, int]], max_seconds: float,
            out: Path | None = None, splits: int = 1) -> list[dict]:
    from mmsuite.measure import Sampling
    from mmsuite.problem import Problem
    from mmsuite.tuner import PlanTimer, time_plans

    sampling = Sampling(min_samples=5, min_seconds=0.0, noise_target=0.01,
                        max_seconds=max_seconds, name="tiles")
    rows = []
    for index, (m, n, k, batch) in enumerate(shapes, 1):
        problem = Problem(n, m, k, batch)  # row-major: the kernels see m x n
        with PlanTimer(problem) as timer:
            device = timer.device
            params = model.parameters_for(device.name)
            timed = time_plans(timer, plans(m, n, k, batch, device, params, splits), sampling,
                               rungs=("cuda.22_adaptive",), with_cublas=True,
                               progress=lambda line: print(line, file=sys.stderr))
            decision = timer.decision()
        row: dict = {"dims": [m, n, k, batch], **timed.as_row(),
                     "rung22": f"{decision.candidate.variant.key}/{decision.candidate.split}"}
        best = min(row["timings"], key=lambda t: t["ms"])
        cublas, own = row["rungs_ms"]["cuda.cublas"], row["rungs_ms"]["cuda.22_adaptive"]
        print(f"[{index}/{len(shapes)}] {n}x{m}x{k} (kernel {m}x{n}): cuBLAS "
              f"{cublas * 1e3:.1f} us, rung 22 {own * 1e3:.1f} us ({row['rung22']}, "
              f"{100 * cublas / own:.1f}% of cuBLAS), fastest {best['key']}/{best['split']} "
              f"{best['ms'] * 1e3:.1f} us", flush=True)
        rows.append(row)
        if out is not None:  # as it goes: a run cut short keeps its rows
            out.write_text(json.dumps({"rows": rows}, indent=1))
    return rows


def timings_of(rows: list[dict]) -> list[model.Timing]:
    """The timed plans that rung 22 offers for their problem."""
    out = []
    for row in rows:
        m, n, k, batch = row["dims"]
        offered = set(candidates(m, n, k, batch, H100_SXM))
        for t in row["timings"]:
            candidate = Candidate(BY_KEY[t["key"]], t["split"])
            if candidate in offered:
                out.append(model.Timing(m, n, k, batch, candidate, t["ms"] * 1e-3))
    return out


def report(label: str, rows: list[dict], params: costs.Parameters) -> dict:
    timings = timings_of(rows)
    accuracy = model.ranking_accuracy(timings, H100_SXM, params)
    error = model.log_error(timings, H100_SXM, params)
    print(f"{label}: log error {error:.3f}; ranking {accuracy.to_dict()}")
    return {"log_error": round(error, 3), **accuracy.to_dict()}


def fit(paths: list[Path], check: list[Path], free: list[tuple[str, str]] = FREE,
        short_k: bool = False) -> None:
    from mmsuite.cuda_dispatch.tuning_file import bundled_model_path, load_model, store_model

    rows = [row for path in paths for row in json.loads(path.read_text())["rows"]
            if not short_k or row["dims"][2] <= model.STORE_BOUND_K]
    held = [row for path in check for row in json.loads(path.read_text())["rows"]]
    path = bundled_model_path(H100_SXM.name)
    assert path is not None
    data = load_model(path)
    start = costs.Parameters.from_dict(data["parameters"], str(path))
    fitted = model.fit(timings_of(rows), H100_SXM, start, only=free)
    merged = start.to_dict()
    for table, name in free:
        value = fitted.to_dict()[table].get(name)
        if value is not None:
            merged[table][name] = float(f"{value:.6g}")
    # A fused tile without a share of its own took its plain tile's: it keeps the one it had.
    for v in VARIANTS:
        if isinstance(v.config, Config) and v.config.fused and v.key not in merged["unaligned"]:
            merged["unaligned"][v.key] = round(start.misaligned(v.key, v.config), 6)
    # "after" is what is written: the freed figures over the file's (the fit's own result
    # also carries figures it extrapolated for variants the timings left out).
    written = costs.Parameters.from_dict(merged, "refitted")
    summary: dict = {}
    for label, params in (("before", start), ("after", written)):
        summary[label] = {"fitted": report(f"{label}, fitted shapes", rows, params)}
        if held:
            summary[label]["held_back"] = report(f"{label}, held-back shapes", held, params)
    refitted = [(table, name) for table, name in free if name in merged[table]]
    for table, name in refitted:
        print(f"{table} {name}: {start.to_dict()[table].get(name)} -> {merged[table][name]}")
    extra = {k: v for k, v in data.items() if k not in ("format", "device", "parameters")}
    store_model(path, data["device"], merged, **extra)
    print(f"wrote {len(refitted)} refitted figures to {path}")
    print(json.dumps(summary))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("measure")
    run.add_argument("--set", choices=sorted(SEEDS), default="moderate")
    run.add_argument("--seed", type=int, default=None, help="default: the set's fitted seed")
    run.add_argument("--count", type=int, default=16)
    run.add_argument("--shapes", nargs="*", default=None,
                     help="row-major MxNxK (or BxMxNxK) instead")
    run.add_argument("--out", type=Path, required=True)
    run.add_argument("--max-seconds", type=float, default=0.1)
    run.add_argument("--splits", type=int, default=1,
                     help="splits timed per small tile (rung 24: every split) (plans)")
    refit = sub.add_parser("fit")
    refit.add_argument("timings", type=Path, nargs="+")
    refit.add_argument("--check", type=Path, nargs="*", default=[],
                       help="timings of shapes not fitted on, to report the ranking on")
    free = refit.add_mutually_exclusive_group()
    for flag, what in FREE_SET_HELP.items():
        free.add_argument(f"--{flag.replace('_', '-')}", action="store_true",
                          help=f"refit {what} instead")
    args = parser.parse_args()
    if args.command == "fit":
        chosen = [names for flag, names in FREE_SETS.items() if getattr(args, flag)]
        fit(args.timings, args.check, chosen[0] if chosen else FREE, short_k=args.epilogue)
        return
    seed = SEEDS[args.set] if args.seed is None else args.seed
    shapes = ([_shape(s) for s in args.shapes] if args.shapes
              else calibration_shapes(args.set, seed, args.count))
    rows = measure(shapes, args.max_seconds, args.out, args.splits)
    args.out.write_text(json.dumps({"set": None if args.shapes else args.set,
                                    "seed": None if args.shapes else seed, "rows": rows},
                                   indent=1))


if __name__ == "__main__":
    main()
