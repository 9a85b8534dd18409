"""Record what the CUDA dispatcher decides, so that a change of its code can be shown to
decide nothing differently.

    python scripts/dispatch_snapshot.py --write tests/fixtures/dispatch_snapshot.json.gz
    python scripts/dispatch_snapshot.py --check tests/fixtures/dispatch_snapshot.json.gz

For seeded random shapes (general, skinny, GEMV-like, short K, long K, batched, and a
few at CUDA's grid and workspace limits) and the shapes of the shipped tuning file, on
an H100 and an H200 with their shipped model files and on a GPU that has no model file
(the starting figures), it records every candidate of the manifest with its modelled
time and the launches it would make, why each variant cannot run at a ladder of split
factors, and the plan every dispatching rung (21, 22, 23, 24, 27, 30) chooses: steps,
grids, blocks, defines, workspace and what was chosen and why. All of it is pure
Python on the planners' ``DeviceFacts``: no GPU is needed. The model files are read
through the code that reads them (their ``parameters`` alone), and file paths are
recorded by name only.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import math
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from mmsuite.cuda_dispatch import model, planners, tuning_file, variants
from mmsuite.cuda_dispatch.family import Candidate
from mmsuite.launch import CudaPlan, DeviceFacts, LaunchLimit

SEED = 20491
#: Split factors at which every variant's applicability is recorded.
PROBED_SPLITS = (1, 2, 3, 5, 8, 16, 48, 128, 512)
DEVICES = (
    DeviceFacts("NVIDIA H100 80GB HBM3"),
    DeviceFacts("NVIDIA H200", memory_clock_mhz=3201, memory_bus_bits=6016,
                l2_bytes=60 * 2**20),
    # No model file is shipped for it: the starting figures rank, on fewer SMs.
    DeviceFacts("NVIDIA A100-SXM4-80GB", sms=108, clock_mhz=1410, memory_clock_mhz=1593,
                l2_bytes=40 * 2**20),
)
#: The rungs that plan per problem, by the planner each names.
RUNG_PLANNERS = {"21": planners.plan_splitk, "22": planners.plan_adaptive,
                 "23": planners.plan_streamk, "24": planners.plan_gemv,
                 "27": planners.plan_shortk, "30": planners.plan_dot}
#: Shapes at the edges: one element, CUDA's grid y/z limit (N and the batch), the
#: workspace cap, stream-K's int counters, a long K on one output.
EDGE_SHAPES = ((1, 1, 1, 1), (4, 8_400_000, 4, 1), (4, 4, 4, 70_000), (3, 5, 7, 66_000),
               (4096, 4096, 4096, 64), (65536, 65536, 65536, 1), (1, 1, 1 << 22, 1),
               (16, 16, 1 << 20, 1), (8192, 8192, 1, 1))


def _log_uniform(rng: np.random.Generator, low: float, high: float) -> int:
    return int(round(math.exp(rng.uniform(math.log(low), math.log(high)))))


def random_shapes(seed: int = SEED) -> list[tuple[int, int, int, int]]:
    """240 seeded (column-major) shapes: M x N x K x batch, 40 of each kind."""
    rng = np.random.default_rng(seed)

    def general() -> tuple[int, int, int, int]:
        while True:
            m, n, k = (_log_uniform(rng, 1, 16384) for _ in range(3))
            if m * n * k <= 2**37:
                return m, n, k, 1

    def skinny() -> tuple[int, int, int, int]:
        small, wide = _log_uniform(rng, 1, 16), _log_uniform(rng, 17, 16384)
        k = _log_uniform(rng, 1, 16384)
        return (small, wide, k, 1) if rng.random() < 0.5 else (wide, small, k, 1)

    def gemv() -> tuple[int, int, int, int]:
        wide, k = _log_uniform(rng, 1, 32768), _log_uniform(rng, 1, 32768)
        return (1, wide, k, 1) if rng.random() < 0.5 else (wide, 1, k, 1)

    def short_k() -> tuple[int, int, int, int]:
        m, n = _log_uniform(rng, 1, 16384), _log_uniform(rng, 1, 16384)
        return m, n, _log_uniform(rng, 1, 128), 1

    def long_k() -> tuple[int, int, int, int]:
        m, n = _log_uniform(rng, 1, 512), _log_uniform(rng, 1, 512)
        return m, n, _log_uniform(rng, 2048, 1 << 20), 1

    def batched() -> tuple[int, int, int, int]:
        while True:
            m, n, k = (_log_uniform(rng, 1, 4096) for _ in range(3))
            batch = _log_uniform(rng, 2, 64)
            if m * n * k * batch <= 2**35:
                return m, n, k, batch

    return [draw() for draw in (general, skinny, gemv, short_k, long_k, batched)
            for _ in range(40)]


def tuned_shapes() -> list[tuple[int, int, int, int]]:
    """The shapes of the shipped tuning file (they are decided by their entries)."""
    path = tuning_file.BUNDLED_DIR / "nvidia-h100-80gb-hbm3.json"
    return [tuple(int(x) for x in key.split("x"))  # type: ignore[misc]
            for key in sorted(tuning_file.load_tuning(path)["entries"])]


@contextmanager
def shipped_files_only() -> Iterator[None]:
    """The shipped tuning and model files decide; the user's folder is an empty one."""
    saved = {name: os.environ.get(name)
             for name in (tuning_file.TUNING_ENV, tuning_file.BUNDLED_ENV)}
    with tempfile.TemporaryDirectory() as empty:
        os.environ[tuning_file.TUNING_ENV] = empty
        os.environ[tuning_file.BUNDLED_ENV] = "1"
        try:
            yield
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


def _plain(value: Any) -> Any:
    """JSON's own form of a value: tuples as lists, file paths by their name."""
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, dict) or hasattr(value, "items"):
        return {str(k): (Path(v).name if k in ("model", "tuning_file") and v else _plain(v))
                for k, v in value.items()}
    return value


def plan_record(plan: CudaPlan) -> dict:
    """A plan's launches, workspace and record, as JSON."""
    steps = [[list(s.grid), list(s.block), s.entry, s.source, _plain(s.defines), s.smem,
              _plain(s.args), s.arch] for s in plan.steps]
    return {"steps": steps, "workspace": plan.workspace, "info": _plain(plan.info)}


def digest(value: Any) -> str:
    """A short fingerprint of a value's exact text (floats at full precision)."""
    return hashlib.sha256(repr(value).encode()).hexdigest()[:24]


def _plan_key(plan: CudaPlan) -> tuple:
    return plan.steps, plan.workspace, sorted(plan.info.items())


def _why_not_table(m: int, n: int, k: int, batch: int, device: DeviceFacts) -> list:
    """Per variant, why it cannot run at each of :data:`PROBED_SPLITS` ('' where it can)."""
    return [[variants.why_not(Candidate(row, split), m, n, k, batch, device)
             for split in PROBED_SPLITS] for row in variants.VARIANTS]


def shape_record(dims: tuple[int, int, int, int], device: DeviceFacts) -> dict:
    """Everything the dispatcher decides for one problem on one device. The bulk (every
    candidate's modelled time and launches, every variant's applicability) is recorded by
    its fingerprint; the plans the rungs choose and the model's five fastest candidates in
    full."""
    m, n, k, batch = dims
    params = model.parameters_for(device.name)
    found = variants.candidates(m, n, k, batch, device)
    estimated = [(c.variant.key, c.split, c.label,
                  model.estimate_seconds(c, m, n, k, batch, device, params)) for c in found]
    forced = [_plan_key(planners.plan_of(planners.Decision(c, "forced"), m, n, k, batch, device))
              for c in found]
    call = SimpleNamespace(m=m, n=n, k=k, batch=batch)
    rungs: dict[str, Any] = {}
    for rung, planner in RUNG_PLANNERS.items():
        try:
            rungs[rung] = plan_record(planner(call, device, None))  # type: ignore[arg-type]
        except (LaunchLimit, ValueError) as exc:
            rungs[rung] = f"{type(exc).__name__}: {exc}"
    fastest = sorted(range(len(estimated)), key=lambda i: (estimated[i][3], i))[:5]
    return {"shape": list(dims), "rungs": rungs,
            "candidates": {"count": len(found), "estimates": digest(estimated),
                           "fastest": [[estimated[i][2], estimated[i][3]] for i in fastest]},
            "forced_plans": digest(forced),
            "why_not": digest(_why_not_table(m, n, k, batch, device))}


#: The devices' shapes: every shape on the H100 and the H200, every sixth on the GPU
#: without a model file.
SHAPE_STRIDE = {DEVICES[0].name: 1, DEVICES[1].name: 1, DEVICES[2].name: 6}


def snapshot(seed: int = SEED) -> dict:
    """The whole record: per device (and its model file), per shape."""
    shapes = random_shapes(seed) + list(EDGE_SHAPES) + tuned_shapes()
    with shipped_files_only():
        devices = {}
        for device in DEVICES:
            params = model.parameters_for(device.name)
            devices[device.name] = {
                "model": Path(params.source).name,
                "shapes": [shape_record(dims, device)
                           for dims in shapes[::SHAPE_STRIDE[device.name]]]}
    return {"seed": seed, "probed_splits": list(PROBED_SPLITS),
            "variants": [row.key for row in variants.VARIANTS], "devices": devices}


def canonical(record: dict) -> dict:
    """``record`` as it reads back from JSON (tuples as lists), for comparing."""
    return json.loads(json.dumps(record))


def write(path: Path, record: dict) -> None:
    text = json.dumps(record, separators=(",", ":"), sort_keys=True)
    with gzip.open(path, "wt", encoding="utf-8", compresslevel=9) as out:
        out.write(text)


def read(path: Path) -> dict:
    with gzip.open(path, "rt", encoding="utf-8") as source:
        return json.load(source)


def differences(old: dict, new: dict, limit: int = 10) -> list[str]:
    """The first ``limit`` places where two records differ, as paths into them."""
    found: list[str] = []

    def walk(a: Any, b: Any, where: str) -> None:
        if len(found) >= limit:
            return
        if isinstance(a, dict) and isinstance(b, dict):
            for key in sorted(set(a) | set(b)):
                walk(a.get(key), b.get(key), f"{where}/{key}")
        elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
            for i, (x, y) in enumerate(zip(a, b)):
                walk(x, y, f"{where}[{i}]")
        elif a != b:
            found.append(f"{where}: {a!r:.120} -> {b!r:.120}")

    walk(old, new, "")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", type=Path, help="record the snapshot into this file")
    action.add_argument("--check", type=Path, help="compare with the snapshot in this file")
    args = parser.parse_args(argv)
    record = canonical(snapshot())
    if args.write:
        write(args.write, record)
        print(f"wrote {args.write} ({args.write.stat().st_size} bytes)")
        return 0
    diffs = differences(read(args.check), record)
    for line in diffs:
        print(line)
    print("identical" if not diffs else "the dispatcher decides differently")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
