"""The planners the catalogue names: per problem, the kernels a rung launches.

A planner is called as ``planner(call, device, override)`` with the
``GemmCall`` (column-major sizes), the :class:`~mmsuite.launch.DeviceFacts` and an
explicit override: a :class:`~.family.Candidate` to launch instead of the
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
from typing import TYPE_CHECKING, Any

from ..launch import CudaPlan, DeviceFacts, LaunchLimit
from . import model
from .families.dot import DOT
from .families.gemv import GEMV
from .families.shortk import SHORTK
from .families.splitk import RUNG21_CONFIG, SPLITK, Config
from .families.streamk import STREAMK
from .family import Candidate
from .tuning_file import tuned
from .variants import FAMILIES, candidates, why_not

if TYPE_CHECKING:
    from ..layout import GemmCall


@dataclass(frozen=True)
class Decision:
    """The candidate a rung launches for one problem, and where it came from."""

    candidate: Candidate[Any]
    source: str  # "model", "tuned" or "forced"
    estimate_s: float | None = None
    tuning_file: str | None = None  # the file that decided or was consulted
    model: str | None = None  # the model file whose parameters ranked the candidates


def decide(m: int, n: int, k: int, batch: int, device: DeviceFacts,
           override: Candidate[Any] | None = None, families: tuple[str, ...] = FAMILIES,
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
    """The launches of a decided candidate, by its family."""
    candidate = decision.candidate
    config = candidate.config
    info: dict[str, Any] = {
        "config": config.name, "params": config.params(), "split": candidate.split,
        "threads": config.threads, "family": candidate.family, "choice": decision.source}
    if decision.estimate_s is not None:
        info["estimate_ms"] = round(decision.estimate_s * 1e3, 4)
    if decision.tuning_file:
        info["tuning_file"] = decision.tuning_file
    if decision.model:
        info["model"] = decision.model
    return candidate.variant.kind.plan(candidate, m, n, k, batch, device, info)


def _plan(call: GemmCall, device: DeviceFacts, override: Candidate[Any] | None,
          **choice) -> CudaPlan:
    decision = decide(call.m, call.n, call.k, call.batch, device, override, **choice)
    return plan_of(decision, call.m, call.n, call.k, call.batch, device)


def plan_adaptive(call: GemmCall, device: DeviceFacts,
                  override: Candidate[Any] | None = None) -> CudaPlan:
    """Rung 22: the tuned entry, else the fitted model's best of every candidate."""
    return _plan(call, device, override)


def plan_splitk(call: GemmCall, device: DeviceFacts,
                override: Candidate[Any] | None = None) -> CudaPlan:
    """Rung 21: its 128x128x8 tile, the split factor the model prefers."""
    return _plan(call, device, override, families=(SPLITK.name,), configs=(RUNG21_CONFIG,),
                 use_tuning=False)


def plan_streamk(call: GemmCall, device: DeviceFacts,
                 override: Candidate[Any] | None = None) -> CudaPlan:
    """Rung 23: the stream-K tile the model prefers."""
    return _plan(call, device, override, families=(STREAMK.name,), use_tuning=False)


def _plan_own(call: GemmCall, device: DeviceFacts, override: Candidate[Any] | None,
              family: str, candidates: list[Candidate[Any]]) -> CudaPlan:
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
                override: Candidate[Any] | None = None) -> CudaPlan:
    """Rung 27: the short-K variant the model prefers (any K: rung 22 offers it only on
    short ones)."""
    return _plan_own(call, device, override, SHORTK.name, SHORTK.own_candidates())


def plan_dot(call: GemmCall, device: DeviceFacts,
             override: Candidate[Any] | None = None) -> CudaPlan:
    """Rung 30: its one variant, the K split the model prefers (any shape: rung 22 offers
    it only where C has few tiles)."""
    return _plan_own(call, device, override, DOT.name, DOT.own_candidates(call.k))


def plan_gemv(call: GemmCall, device: DeviceFacts,
              override: Candidate[Any] | None = None) -> CudaPlan:
    """Rung 24: its variants for the skinny side (plain or fused; on the N side, blocks of
    128, 64 or 32 rows, of the least columns that hold N or half those in two groups), the
    split factor the model prefers (16 columns at a time when no side is skinny)."""
    return _plan_own(call, device, override, GEMV.name,
                     GEMV.own_candidates(call.m, call.n, call.k))
