"""Judge rung 22's dispatcher on shapes drawn at random, after its model was fitted.

    python scripts/dispatch_judge.py --seed 90210 --shapes 40 --batched 8 --out judge.md

Draws ``--shapes`` problems with M, N and K log-uniform in [1, 16384] and M·N·K at most
2^37, plus ``--batched`` batched ones (batch 2-64, M·N·K·batch at most 2^35), prints
them, and times cuBLAS and rungs 20-23 on each in one ``mmsuite run`` per batch size
(the suite's timer, every kernel verified). The table gives rung 22 against cuBLAS and
against the best of rungs 20, 21 and 23, with the geometric mean, the minimum and how
many shapes are within 3% and 8% of the best rung.

The shapes are drawn from a seed that the model's fitting never used (its model file
names the seeds and shapes it was fitted on); pass a fresh seed to judge a refit.

``--tune N`` also runs a fresh ``mmsuite tune`` on the first N shapes, with a temporary
tuning folder (the user's tuning files are neither read nor written; the shipped model
ranks), and reports per shape the model's plan against the fastest
plan the search found, in its interleaved rounds: within 3% counts as a match.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np

from mmsuite.tuner import log_uniform

LIMIT = 16384
RIVALS = ("cuda.20_tuned", "cuda.21_splitk", "cuda.23_streamk")
JUDGED = "cuda.22_adaptive"
REFERENCE = "cuda.cublas"
TUNING_ENV = "MMSUITE_TUNING_DIR"  # mmsuite.cuda_dispatch.tuning_file.TUNING_ENV
WITHIN = 1.03


def draw(seed: int, count: int, batched: int) -> list[tuple[int, int, int, int]]:
    """(batch, m, n, k) problems: ``count`` single ones, then ``batched`` batched ones."""
    rng = np.random.default_rng(seed)
    shapes: list[tuple[int, int, int, int]] = []
    while len(shapes) < count:
        m, n, k = (log_uniform(rng, 1, LIMIT) for _ in range(3))
        if m * n * k <= 2**37:
            shapes.append((1, m, n, k))
    while len(shapes) < count + batched:
        batch = int(rng.integers(2, 65))
        m, n, k = (log_uniform(rng, 1, LIMIT) for _ in range(3))
        if m * n * k * batch <= 2**35:
            shapes.append((batch, m, n, k))
    return shapes


def measure(shapes: list[tuple[int, int, int, int]], max_time: float) -> list[dict]:
    """Every record of one ``mmsuite run`` per batch size over the shapes."""
    by_batch: dict[int, list[str]] = defaultdict(list)
    for batch, m, n, k in shapes:
        by_batch[batch].append(f"{m}x{n}x{k}")
    records: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        for batch, labels in sorted(by_batch.items()):
            out = Path(tmp) / f"batch{batch}.json"
            command = [sys.executable, "-m", "mmsuite.cli", "run", "--backend", "cuda",
                       "--kernel", REFERENCE, "--kernel", JUDGED, "--batch", str(batch),
                       "--max-time", str(max_time), "--json", str(out)]
            for kernel in RIVALS:
                command += ["--kernel", kernel]
            for label in labels:
                command += ["--shape", label]
            print(f"batch {batch}: {len(labels)} shapes", file=sys.stderr, flush=True)
            subprocess.run(command, check=False, stdout=subprocess.DEVNULL)
            if out.exists():
                records += json.loads(out.read_text())["results"]
    return records


def tune_command(batch: int, labels: list[str], candidates: int, rounds: int,
                 out: Path) -> list[str]:
    """``mmsuite tune`` for the shapes of one batch size, its outcomes written to ``out``."""
    command = [sys.executable, "-m", "mmsuite.cli", "tune", "--batch", str(batch),
               "--candidates", str(candidates), "--confirm", "2", "--rounds", str(rounds),
               "--json", str(out)]
    for label in labels:
        command += ["--shape", label]
    return command


def tune(shapes: list[tuple[int, int, int, int]], candidates: int, rounds: int) -> list[dict]:
    """Each shape's ``mmsuite tune --json`` outcome, searched with a temporary tuning folder
    (tune ranks against the model's plan, whatever a tuning file says; the model is the
    shipped one, and nothing the search stores outlives it)."""
    by_batch: dict[int, list[str]] = defaultdict(list)
    for batch, m, n, k in shapes:
        by_batch[batch].append(f"{m}x{n}x{k}")
    outcomes: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, TUNING_ENV: tmp}
        for batch, labels in sorted(by_batch.items()):
            out = Path(tmp) / f"tune{batch}.json"
            print(f"tune, batch {batch}: {len(labels)} shapes", file=sys.stderr, flush=True)
            subprocess.run(tune_command(batch, labels, candidates, rounds, out), check=False,
                           stdout=subprocess.DEVNULL, env=env)
            if out.exists():
                outcomes += json.loads(out.read_text())["tuned"]
    return outcomes


def tune_table(shapes: list[tuple[int, int, int, int]],
               outcomes: list[dict]) -> tuple[list[str], list[str]]:
    """The lines of the tuned shapes' table (the model's plan over the fastest found) and
    the summary's line. ``outcomes`` carry row-major problems, as drawn."""
    found = {(o["problem"]["batch"], o["problem"]["m"], o["problem"]["n"], o["problem"]["k"]): o
             for o in outcomes}
    lines = ["| batch | M×N×K | model's plan | µs | fastest found | µs | model / fastest |",
             "|---|---|---|---|---|---|---|"]
    ratios = []
    for key in shapes:
        o = found.get(key)
        if o is None:
            lines.append(f"| {key[0]} | {key[1]}×{key[2]}×{key[3]} | - | not tuned | - | - | - |")
            continue
        ratio = o["model_ms"] / o["best_ms"]
        ratios.append(ratio)
        plan = f"{o['model']['config']}/" + (  # labelled as tune labels its best
            "stream-K" if o["model"]["family"] == "streamk" else str(o["model"]["split"]))
        lines.append(f"| {key[0]} | {key[1]}×{key[2]}×{key[3]} | {plan} | "
                     f"{1e3 * o['model_ms']:.1f} | {o['best']} | {1e3 * o['best_ms']:.1f} | "
                     f"{ratio:.3f} |")
    summary = []
    if ratios:
        within = sum(1 for r in ratios if r <= WITHIN)
        summary.append(f"model's plan within 3% of a fresh tune's fastest: {within} of "
                       f"{len(ratios)}; worst {max(ratios):.3f}")
    return lines, summary


def judge(shapes: list[tuple[int, int, int, int]],
          records: list[dict]) -> tuple[list[str], list[str]]:
    """The table's lines and the summary's lines."""
    times: dict[tuple, dict[str, float]] = defaultdict(dict)
    plans: dict[tuple, str] = {}
    failures: list[str] = []
    for record in records:
        p = record["problem"]
        key = (p["batch"], p["m"], p["n"], p["k"])
        if record["kernel"] == JUDGED:
            plans[key] = plan_text(record)
        if record["status"] == "ok":
            times[key][record["kernel"]] = record["kernel_ms"]["median"]
        else:
            failures.append(f"{record['kernel']} on {key}: {record['status']} "
                            f"({record.get('reason', '')})")
    lines = ["| batch | M×N×K | rung 22 plan | % cuBLAS | best rival | rung 22 / best rival |",
             "|---|---|---|---|---|---|"]
    vs_ref, vs_best = [], []
    for key in shapes:
        row = times.get(key, {})
        if JUDGED not in row or REFERENCE not in row:
            lines.append(f"| {key[0]} | {key[1]}×{key[2]}×{key[3]} | - | not measured | - | - |")
            continue
        ours = row[JUDGED]
        rivals = {k: row[k] for k in RIVALS if k in row}
        best = min(rivals, key=rivals.__getitem__) if rivals else None
        ratio_ref = row[REFERENCE] / ours
        vs_ref.append(ratio_ref)
        speed = rivals[best] / ours if best else float("nan")
        if best:
            vs_best.append(speed)
        lines.append(f"| {key[0]} | {key[1]}×{key[2]}×{key[3]} | {plans.get(key, '-')} | "
                     f"{100 * ratio_ref:.1f} | {best or '-'} | {speed:.3f} |")
    summary = []
    if vs_ref:
        summary.append(f"rung 22 / cuBLAS over {len(vs_ref)} shapes: geomean "
                       f"{100 * math.exp(np.mean(np.log(vs_ref))):.1f}%, min "
                       f"{100 * min(vs_ref):.1f}%")
    if vs_best:
        within3 = sum(1 for s in vs_best if s >= 1 / 1.03)
        within8 = sum(1 for s in vs_best if s >= 1 / 1.08)
        summary.append(f"rung 22 within 3% of the best of rungs 20/21/23: {within3} of "
                       f"{len(vs_best)}; within 8%: {within8} of {len(vs_best)}; worst "
                       f"{min(vs_best):.3f}")
    summary += [f"not ok: {line}" for line in failures]
    return lines, summary


def plan_text(record: dict) -> str:
    """The plan rung 22 launched for a record, as "family config ×split"."""
    dispatch = (record.get("info") or {}).get("dispatch") or {}
    split = dispatch.get("split")
    return f"{dispatch.get('family', '?')} {dispatch.get('config', '?')}" + (
        f" ×{split}" if split and split > 1 else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=90210)
    parser.add_argument("--shapes", type=int, default=40)
    parser.add_argument("--batched", type=int, default=8)
    parser.add_argument("--max-time", type=float, default=0.3,
                        help="run's --max-time per kernel and shape")
    parser.add_argument("--out", type=Path, help="also write the table here (Markdown)")
    parser.add_argument("--tune", type=int, default=0, metavar="N",
                        help="also run a fresh mmsuite tune on the first N shapes")
    parser.add_argument("--tune-candidates", type=int, default=8,
                        help="tune's --candidates (default 8)")
    parser.add_argument("--tune-rounds", type=int, default=7, help="tune's --rounds (default 7)")
    args = parser.parse_args()
    if min(args.tune_candidates, args.tune_rounds) < 1 or args.tune < 0:
        parser.error("--tune must be 0 or more, --tune-candidates and --tune-rounds positive")
    shapes = draw(args.seed, args.shapes, args.batched)
    print(f"seed {args.seed}: " + ", ".join(
        f"{b}×{m}×{n}×{k}" if b > 1 else f"{m}×{n}×{k}" for b, m, n, k in shapes), flush=True)
    lines, summary = judge(shapes, measure(shapes, args.max_time))
    if args.tune:
        tuned = shapes[:args.tune]
        tune_lines, tune_summary = tune_table(
            tuned, tune(tuned, args.tune_candidates, args.tune_rounds))
        lines += [""] + tune_lines
        summary += tune_summary
    text = "\n".join(lines + [""] + summary) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
