"""Time rung 27's variants on short-K and small products, and fit the cost model's rung 27 terms.

    python scripts/shortk_calibration.py measure --out timings.json [--seed 5150]
    python scripts/shortk_calibration.py fit timings.json

``measure`` (on a GPU) verifies and times, per problem, every variant of rung 27 that can
run it, the model's three best plans of the other families, rung 22's own plan and
cuBLAS, by the suite's timer, on a seeded draw of tiny products, small-M products with N
wide and batched, and short-K products (seed 5150 was fitted on; none of its shapes is
in a judge seed's draw). Another seed gives shapes to check a fit on.

``fit`` refits, on the measured timings of rung 27's variants alone, their per-variant
parameters and the model's K-chunk term for rung 27, every other figure held at the
device's model file, and writes them there; it prints the error of the times and how
the model ranks every measured plan, before and after.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from mmsuite.cuda_dispatch import costs, model
from mmsuite.cuda_dispatch.families.shortk import SHORTK_CONFIGS
from mmsuite.cuda_dispatch.family import Candidate
from mmsuite.cuda_dispatch.variants import BY_KEY, VARIANTS, candidates, variant, why_not
from mmsuite.launch import H100_SXM
from mmsuite.tuner import log_uniform

SEED = 5150


def calibration_shapes(seed: int = SEED) -> list[tuple[int, int, int, int]]:
    """(m, n, k, batch), column-major: 12 tiny, 14 small-M wide, 10 short-K wide, and for
    the fitted seed 5 with enough FMAs (2^28 or more) to tell the variants' rates."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(12):  # tiny: one block or a few; the launch and the K chunks decide
        batch = 1 if i % 2 == 0 else log_uniform(rng, 2, 8)
        out.append((log_uniform(rng, 1, 48), log_uniform(rng, 1, 48),
                    log_uniform(rng, 8, 128), batch))
    while len(out) < 26:  # M within a whole-column block, N wide, often batched
        m, n = log_uniform(rng, 2, 32), log_uniform(rng, 256, 16384)
        k, batch = log_uniform(rng, 4, 128), log_uniform(rng, 1, 64)
        if m * n * batch <= 2**25:
            out.append((m, n, k, batch))
    while len(out) < 36:  # short K, C large: the stores and the FMAs
        out.append((log_uniform(rng, 256, 8192), log_uniform(rng, 256, 8192),
                    log_uniform(rng, 1, 96), 1))
    if seed != SEED:
        return out
    return out + [(32, 16384, 128, 16), (16, 8192, 96, 40), (7, 12000, 120, 64),
                  (4097, 4096, 64, 1), (2049, 3001, 90, 1)]


def measure(shapes: list[tuple[int, int, int, int]], max_seconds: float) -> list[dict]:
    from mmsuite.measure import Sampling
    from mmsuite.problem import Problem
    from mmsuite.tuner import PlanTimer, time_plans

    sampling = Sampling(min_samples=5, min_seconds=0.0, noise_target=0.01,
                        max_seconds=max_seconds, name="shortk")
    rows = []
    for index, (m, n, k, batch) in enumerate(shapes, 1):
        problem = Problem(n, m, k, batch)  # row-major: the kernels see m x n
        with PlanTimer(problem) as timer:
            assert timer.dims == (m, n, k, batch)
            device = timer.device
            params = model.parameters_for(device.name)
            own = [Candidate(variant("shortk", c)) for c in SHORTK_CONFIGS]
            own = [c for c in own if not why_not(c, m, n, k, batch, device)
                   and (not c.config.cols or m <= c.config.bm)]
            others = [c for _, c in model.ranked(candidates(m, n, k, batch, device),
                                                 m, n, k, batch, device, params)
                      if c.family != "shortk"][:3]
            timed = time_plans(timer, own + others, sampling, rungs=("cuda.22_adaptive",),
                               with_cublas=True,
                               progress=lambda line: print(line, file=sys.stderr))
            decision = timer.decision()
        row: dict = {"dims": [m, n, k, batch], **timed.as_row(),
                     "rung22": decision.candidate.variant.key}
        best = min(row["timings"], key=lambda t: t["ms"])
        print(f"[{index}/{len(shapes)}] {batch}x{m}x{n}x{k}: cuBLAS "
              f"{row['rungs_ms']['cuda.cublas'] * 1e3:.1f} us, rung 22 "
              f"{row['rungs_ms']['cuda.22_adaptive'] * 1e3:.1f} us ({row['rung22']}), fastest "
              f"{best['key']}/{best['split']} {best['ms'] * 1e3:.1f} us", flush=True)
        rows.append(row)
    return rows


def timings_of(rows: list[dict], family: str | None = None) -> list[model.Timing]:
    out = []
    for row in rows:
        m, n, k, batch = row["dims"]
        for t in row["timings"]:
            candidate = Candidate(BY_KEY[t["key"]], t["split"])
            if family is None or candidate.family == family:
                out.append(model.Timing(m, n, k, batch, candidate, t["ms"] * 1e-3))
    return out


#: Rung 27's parameters: its variants' own and the staging round; the fit frees those the
#: timings inform.
RUNG27 = [("shared", "shortk_round_s")] + [(table, v.key) for v in VARIANTS
                                           if v.family == "shortk"
                                           for table in costs.PER_VARIANT]


def fit(paths: list[Path]) -> None:
    from mmsuite.cuda_dispatch.tuning_file import bundled_model_path, load_model, store_model

    rows = [row for path in paths for row in json.loads(path.read_text())["rows"]]
    own, every = timings_of(rows, "shortk"), timings_of(rows)
    path = bundled_model_path(H100_SXM.name)
    data = load_model(path)
    start = costs.Parameters.from_dict(data["parameters"], str(path))
    fitted = model.fit(own, H100_SXM, start, only=RUNG27)
    for label, params in (("before", start), ("after", fitted)):
        accuracy = model.ranking_accuracy(every, H100_SXM, params)
        print(f"{label}: log error (rung 27) {model.log_error(own, H100_SXM, params):.3f}; "
              f"ranking of every measured plan: {accuracy.to_dict()}")
    merged = start.to_dict()
    for table, values in fitted.to_dict().items():
        for key, value in values.items():
            if key.startswith("shortk:") or key == "shortk_round_s":
                merged[table][key] = round(value, 6 if value > 1e-3 else 12)
    extra = {k: v for k, v in data.items() if k not in ("format", "device", "parameters")}
    store_model(path, data["device"], merged, **extra)
    print(f"wrote rung 27's terms to {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("measure")
    run.add_argument("--seed", type=int, default=SEED)
    run.add_argument("--out", type=Path, required=True)
    run.add_argument("--max-seconds", type=float, default=0.15)
    refit = sub.add_parser("fit")
    refit.add_argument("timings", type=Path, nargs="+")
    args = parser.parse_args()
    if args.command == "fit":
        fit(args.timings)
        return
    rows = measure(calibration_shapes(args.seed), args.max_seconds)
    args.out.write_text(json.dumps({"seed": args.seed, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
