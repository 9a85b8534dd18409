"""The manifest: the list of dispatch families, the one table of compiled variants they
give, and what applies where.

Like the CUTLASS profiler's manifest, every variant is one row of :data:`VARIANTS`;
each family (:mod:`.families`) says what it offers for a problem, whether a candidate
can run it, what it costs and how it launches (:class:`.family.Family`), and this
module asks each in turn: :func:`candidates` lists every candidate (a variant and its
split factor) that can run a problem, :func:`why_not` says why one cannot. A new family
is its kernel, its module, one line of :data:`MANIFEST`, its catalogue entry and its
fitted figures.
"""

from __future__ import annotations

from typing import Any

from ..launch import H100_SXM, DeviceFacts
from .families.dot import DOT
from .families.gemv import GEMV
from .families.shortk import SHORTK
from .families.splitk import SPLITK
from .families.streamk import STREAMK
from .family import Candidate, Family, Variant
from .occupancy import workspace_problem

#: Every family rung 22 chooses among, in the manifest's order (ties of the model keep it).
MANIFEST: tuple[Family[Any], ...] = (SPLITK, STREAMK, GEMV, SHORTK, DOT)
BY_NAME: dict[str, Family[Any]] = {family.name: family for family in MANIFEST}
VARIANTS: tuple[Variant[Any], ...] = tuple(v for family in MANIFEST for v in family.variants)
BY_KEY = {v.key: v for v in VARIANTS}
FAMILIES: tuple[str, ...] = tuple(BY_NAME)


def variant(family: str, config: Any) -> Variant[Any]:
    """The manifest's row of a config in a family (KeyError when it has none)."""
    return BY_KEY[f"{family}:{config.name}"]


def why_not(candidate: Candidate[Any], m: int, n: int, k: int, batch: int,
            device: DeviceFacts = H100_SXM) -> str:
    """Why ``candidate`` cannot launch this problem (the workspace cap, then its family's
    reasons: grid limits, splits, stream-K's int counters, GEMV's skinny side), or '' when
    it can: the one place that decides."""
    reason = workspace_problem(candidate.split, m, n, batch)
    if reason:
        return reason
    return candidate.variant.kind.why_not(candidate.config, candidate.split, m, n, k, batch,
                                          device)


def candidates(m: int, n: int, k: int, batch: int = 1, device: DeviceFacts = H100_SXM,
               families: tuple[str, ...] | None = None,
               configs: tuple[Any, ...] | None = None) -> list[Candidate[Any]]:
    """Every candidate of the manifest that can run the problem: each variant of
    ``families`` (all) with each split factor its family offers it with
    (:meth:`.family.Family.splits`). ``configs`` keeps only those tile shapes (rung 21
    keeps its own)."""
    families = FAMILIES if families is None else families
    out = []
    for row in VARIANTS:
        if row.family not in families or (configs is not None and row.config not in configs):
            continue
        for split in row.kind.splits(row.config, m, n, k, batch, device, families):
            candidate = Candidate(row, split)
            if not why_not(candidate, m, n, k, batch, device):
                out.append(candidate)
    return out
