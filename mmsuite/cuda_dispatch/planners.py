"""The planners the catalogue names: per problem, the kernels a rung launches.

A planner is called as ``planner(call, device, override)`` with the
``GemmCall`` (column-major sizes), the :class:`~.device.DeviceFacts` and an
explicit override: a :class:`~.variants.Candidate` to launch instead of the
rung's own choice (``mmsuite tune`` times candidates this way), or None. It
returns the ``CudaPlan``: the main kernel, then the reduction or the fix-up
when K is shared, with a workspace and what was chosen and why in
``info["dispatch"]``.

Rung 22 takes the device's tuned entry for the problem's exact sizes when one
exists (:mod:`.tuning_file`), else the candidate of the whole manifest
(:mod:`.variants`: split-K tiles and splits, stream-K tiles, rung 24 for
min(M, N) <= 16, on the N side also in two column groups of half the width, rung 27
for short K, rung 30 for few outputs) that the device's fitted cost model
(:mod:`.model`) ranks fastest. Rungs 21, 23, 24, 27 and 30 keep to their own kernels
and ignore the tuning file (one problem has one entry per device, and it belongs
to rung 22).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..launch import GEMM_ARGS, CudaPlan, CudaStep, LaunchLimit
from . import model
from .device import DeviceFacts
from .tuning_file import tuned
from .variants import (
    DOT_CONFIG,
    FAMILIES,
    FIXUP_THREADS,
    GEMV_CONFIGS,
    REDUCE_THREADS,
    RUNG21_CONFIG,
    SHORTK_CONFIGS,
    Candidate,
    Config,
    GemvConfig,
    ShortKConfig,
    candidates,
    dot_kchunk,
    dot_splits,
    dot_tiles,
    gemv_counters,
    gemv_grid,
    gemv_kchunk,
    gemv_runs,
    gemv_splits,
    shortk_grid,
    splitk_workspace,
    streamk_split,
    streamk_staged_store,
    variant,
    why_not,
)

if TYPE_CHECKING:
    from ..layout import GemmCall


@dataclass(frozen=True)
class Decision:
    """The candidate a rung launches for one problem, and where it came from."""

    candidate: Candidate
    source: str  # "model", "tuned" or "forced"
    estimate_s: float | None = None
    tuning_file: str | None = None  # the file that decided or was consulted
    model: str | None = None  # the model file whose parameters ranked the candidates


def decide(m: int, n: int, k: int, batch: int, device: DeviceFacts,
           override: Candidate | None = None, families: tuple[str, ...] = FAMILIES,
           configs: tuple[Config, ...] | None = None, use_tuning: bool = True) -> Decision:
    """The override, else the tuned entry (when ``use_tuning``), else the model's best."""
    if override is not None:
        reason = why_not(override, m, n, k, batch, device)
        if reason:
            raise ValueError(f"forced plan {override.label} cannot run {batch}x{m}x{n}x{k}: "
                             f"{reason}")
        return Decision(override, "forced")
    consulted = None
    if use_tuning:
        entry, path = tuned(device.name, m, n, k, batch)
        consulted = str(path) if path else None
        if entry is not None and not why_not(entry, m, n, k, batch, device):
            return Decision(entry, "tuned", tuning_file=consulted)
    params = model.parameters_for(device.name)
    found = candidates(m, n, k, batch, device, families, configs)
    if not found:
        raise LaunchLimit(f"no plan of {', '.join(families)} fits {batch}x{m}x{n}x{k} within "
                          "CUDA's grid limits and the workspace cap")
    seconds, best = model.ranked(found, m, n, k, batch, device, params)[0]
    return Decision(best, "model", seconds, consulted, params.source)


def plan_of(decision: Decision, m: int, n: int, k: int, batch: int,
            device: DeviceFacts) -> CudaPlan:
    """The launches of a decided candidate."""
    candidate = decision.candidate
    config = candidate.config
    row = candidate.variant
    defines = tuple(sorted(config.defines.items()))
    info: dict[str, object] = {
        "config": config.name, "params": config.params(), "split": candidate.split,
        "threads": config.threads, "family": candidate.family, "choice": decision.source}
    if decision.estimate_s is not None:
        info["estimate_ms"] = round(decision.estimate_s * 1e3, 4)
    if decision.tuning_file:
        info["tuning_file"] = decision.tuning_file
    if decision.model:
        info["model"] = decision.model
    if candidate.family == "streamk":
        assert isinstance(config, Config)
        split = streamk_split(config, m, n, k, batch, device)
        counts = (split.sk_ctas, split.sk_tiles)
        if streamk_staged_store(config, m):
            defines = tuple(sorted(defines + (("STAGED_STORE", 1),)))
        steps = [CudaStep(split.grid, (config.threads,), row.entry, row.source, defines,
                          args=GEMM_ARGS + ("work",) + counts)]
        if split.sk_ctas:
            steps.append(CudaStep(split.fixup_grid, (FIXUP_THREADS,), row.second_entry, row.source,
                                  defines, args=("m", "n", "k", "alpha", "work", "beta", "c")
                                  + counts))
        return CudaPlan(tuple(steps), workspace=split.workspace_elems,
                        info={"dispatch": {**info, "streamk": True, **split.info()}})
    if candidate.family == "dot":
        slices = candidate.split
        step = CudaStep((dot_tiles(m, n), slices, batch), (config.threads,), row.entry,
                        row.source, defines, args=GEMM_ARGS + ("work", dot_kchunk(k, slices)))
        # The slices, then one arrival counter per tile (the workspace starts zeroed).
        workspace = batch * slices * m * n + dot_tiles(m, n) * batch if slices > 1 else 0
        return CudaPlan((step,), workspace=workspace, info={"dispatch": info})
    if candidate.family == "shortk":
        assert isinstance(config, ShortKConfig)
        return CudaPlan((CudaStep(shortk_grid(config, m, n, batch), (config.threads,),
                                  row.entry, row.source, defines, args=GEMM_ARGS),),
                        info={"dispatch": info})
    if candidate.family == "gemv":
        assert isinstance(config, GemvConfig)
        grid = gemv_grid(config, m, n, batch, candidate.split)
        main = CudaStep(grid, (config.threads,), row.entry, row.source, defines,
                        args=GEMM_ARGS + ("work", gemv_kchunk(k, candidate.split)))
        if config.fused and candidate.split > 1:  # the slices are added in the same launch
            # The arrival counters follow the slices; the workspace starts zeroed and
            # each launch leaves them zero.
            workspace = (batch * candidate.split * m * n
                         + gemv_counters(config, m, n, batch, candidate.split))
            return CudaPlan((main,), workspace=workspace, info={"dispatch": info})
    else:
        assert isinstance(config, Config)
        grid = (-(-m // config.bm), -(-n // config.bn), batch * candidate.split)
        smem = config.smem_bytes if config.smem_dynamic else 0
        main = CudaStep(grid, (config.threads,), row.entry, row.source, defines, smem=smem,
                        args=GEMM_ARGS + ("work", candidate.split))
    steps = [main]
    workspace = 0
    if candidate.split > 1 and isinstance(config, Config) and config.fused:
        # The last block of each tile adds the slices: no second launch. The counters
        # follow the packed tiles; the workspace starts zeroed and each launch leaves them 0.
        workspace = splitk_workspace(config, m, n, batch, candidate.split)
    elif candidate.split > 1:
        workspace = batch * candidate.split * m * n
        steps.append(CudaStep((model.reduce_blocks(m, n, batch, device), 1, 1),
                              (REDUCE_THREADS,), row.second_entry, row.source, defines,
                              args=("m", "n", "batch", "alpha", "work", "beta", "c",
                                    candidate.split)))
    return CudaPlan(tuple(steps), workspace=workspace, info={"dispatch": info})


def _plan(call: GemmCall, device: DeviceFacts, override: Candidate | None,
          **choice) -> CudaPlan:
    decision = decide(call.m, call.n, call.k, call.batch, device, override, **choice)
    return plan_of(decision, call.m, call.n, call.k, call.batch, device)


def plan_adaptive(call: GemmCall, device: DeviceFacts,
                  override: Candidate | None = None) -> CudaPlan:
    """Rung 22: the tuned entry, else the fitted model's best of every candidate."""
    return _plan(call, device, override)


def plan_splitk(call: GemmCall, device: DeviceFacts,
                override: Candidate | None = None) -> CudaPlan:
    """Rung 21: its 128x128x8 tile, the split factor the model prefers."""
    return _plan(call, device, override, families=("splitk",), configs=(RUNG21_CONFIG,),
                 use_tuning=False)


def plan_streamk(call: GemmCall, device: DeviceFacts,
                 override: Candidate | None = None) -> CudaPlan:
    """Rung 23: the stream-K tile the model prefers."""
    return _plan(call, device, override, families=("streamk",), use_tuning=False)


def _plan_own(call: GemmCall, device: DeviceFacts, override: Candidate | None, family: str,
              candidates: list[Candidate]) -> CudaPlan:
    """A rung that runs only ``family``: the model's best of ``candidates`` (the variants
    and splits this rung may run on the call's shape), or the override."""
    if override is None:
        params = model.parameters_for(device.name)
        found = [c for c in candidates
                 if not why_not(c, call.m, call.n, call.k, call.batch, device)]
        if found:
            seconds, best = model.ranked(found, call.m, call.n, call.k, call.batch, device,
                                         params)[0]
            return plan_of(Decision(best, "model", seconds, model=params.source),
                           call.m, call.n, call.k, call.batch, device)
    return _plan(call, device, override, families=(family,), use_tuning=False)


def plan_shortk(call: GemmCall, device: DeviceFacts,
                override: Candidate | None = None) -> CudaPlan:
    """Rung 27: the short-K variant the model prefers (any K: rung 22 offers it only on
    short ones)."""
    return _plan_own(call, device, override, "shortk",
                     [Candidate(variant("shortk", c)) for c in SHORTK_CONFIGS])


def plan_dot(call: GemmCall, device: DeviceFacts,
             override: Candidate | None = None) -> CudaPlan:
    """Rung 30: its one variant, the K split the model prefers (any shape: rung 22 offers
    it only where C has few tiles)."""
    return _plan_own(call, device, override, "dot",
                     [Candidate(variant("dot", DOT_CONFIG), s) for s in dot_splits(call.k)])


def plan_gemv(call: GemmCall, device: DeviceFacts,
              override: Candidate | None = None) -> CudaPlan:
    """Rung 24: its variants for the skinny side (plain or fused; on the N side, blocks of
    128, 64 or 32 rows, of the least columns that hold N or half those in two groups), the
    split factor the model prefers (16 columns at a time when no side is skinny)."""
    return _plan_own(call, device, override, "gemv",
                     [Candidate(variant("gemv", config), s)
                      for config in GEMV_CONFIGS if gemv_runs(config, call.m, call.n)
                      for s in gemv_splits(call.k)])
