"""The interface every dispatch family keeps, and the rows and plans it offers.

A family (:mod:`.families`) is one kernel source and its compiled variants. It says,
for a problem, which split factors each of its variants is offered with
(:meth:`Family.splits`), why a variant cannot run it (:meth:`Family.why_not`), what a
candidate costs (:meth:`Family.cost`) and which kernels it launches
(:meth:`Family.plan`). The manifest (:mod:`.variants`) is the list of families;
nothing outside a family's module asks which family a candidate belongs to.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar

from .costs import Figured

if TYPE_CHECKING:
    from ..launch import CudaPlan, DeviceFacts
    from .costs import Parameters


class VariantConfig(Figured, Protocol):
    """What every family's configs give: a name, -D defines, threads, tuning parameters,
    and which fitted figures stand for them (:class:`.costs.Figured`)."""

    @property
    def name(self) -> str: ...

    @property
    def defines(self) -> dict[str, int]: ...

    @property
    def threads(self) -> int: ...

    def params(self) -> dict: ...


C = TypeVar("C", bound=VariantConfig)


@dataclass(frozen=True)
class Variant(Generic[C]):
    """One compiled variant: a row of the manifest."""

    kind: Family[C]
    config: C
    entry: str
    second_entry: str = ""  # the reduction or fix-up launched after it when K is shared

    @property
    def family(self) -> str:
        return self.kind.name

    @property
    def source(self) -> str:
        return self.kind.source

    @property
    def key(self) -> str:
        """The variant's name across families: the cost model's parameters are keyed by it."""
        return f"{self.family}:{self.config.name}"


@dataclass(frozen=True)
class Candidate(Generic[C]):
    """A plan rung 22 may launch: a variant and how many slices K is cut into."""

    variant: Variant[C]
    split: int = 1

    @property
    def family(self) -> str:
        return self.variant.family

    @property
    def config(self) -> C:
        return self.variant.config

    @property
    def label(self) -> str:
        return self.variant.kind.label(self)


class Family(ABC, Generic[C]):
    """One kernel family: its variants, what it offers, whether it runs, cost, launches."""

    name: ClassVar[str]
    source: ClassVar[str]
    #: Stream-K cuts K its own way: its tuning entries have split 1.
    splits_own_way: ClassVar[bool] = False
    #: Rungs 21 and 23's tiles: their rates and store shares are extrapolated from each
    #: other's where a fit did not time them.
    tile: ClassVar[bool] = False
    #: Rung 24's rate is a share of the memory's bandwidth (any timing tells it, it has no
    #: store share) and its ``latency`` figure a round of its K loop.
    streams: ClassVar[bool] = False
    #: Its rates are its own: a fit never extrapolates them from the tiles'.
    own_rates: ClassVar[bool] = False
    #: The shared figures of :data:`.costs.SHARED_DEFAULTS` that only some families'
    #: timings inform, of which this family's are some.
    informs: ClassVar[tuple[str, ...]] = ()

    def __repr__(self) -> str:
        return f"<family {self.name}>"

    @property
    @abstractmethod
    def variants(self) -> tuple[Variant[C], ...]:
        """Its rows of the manifest, in the manifest's order."""

    @abstractmethod
    def splits(self, config: C, m: int, n: int, k: int, batch: int, device: DeviceFacts,
               among: tuple[str, ...]) -> list[int]:
        """The split factors ``config`` is offered with for the problem by rung 22 ([]: not
        offered), when rung 22 chooses ``among`` these families."""

    @abstractmethod
    def why_not(self, config: C, split: int, m: int, n: int, k: int, batch: int,
                device: DeviceFacts) -> str:
        """Why ``config`` in ``split`` slices cannot launch the problem, or ''."""

    @abstractmethod
    def cost(self, candidate: Candidate[C], m: int, n: int, k: int, batch: int,
             device: DeviceFacts, params: Parameters) -> float:
        """The modelled seconds of one call of ``candidate`` on the (column-major) problem."""

    @abstractmethod
    def plan(self, candidate: Candidate[C], m: int, n: int, k: int, batch: int,
             device: DeviceFacts, info: dict[str, Any]) -> CudaPlan:
        """The launches of ``candidate``, its ``info`` recorded in ``info["dispatch"]``."""

    @abstractmethod
    def config_of(self, params: dict) -> C:
        """The config a tuning file's parameters name."""

    def label(self, candidate: Candidate[C]) -> str:
        return f"{candidate.config.name}/{candidate.split}"

    def starting_latency(self, p: Parameters, config: C, key: str) -> float:
        """Where a fit starts the variant's ``latency`` figure: a block's prologue and
        epilogue."""
        return p.block_latency(key)

    def staged(self, config: C, m: int) -> bool:
        """Whether the variant stores C of this M through shared memory."""
        return False

    def misaligned(self, config: C, m: int, k: int) -> bool:
        """Whether the problem's sizes cost the variant its 16-byte loads or stores."""
        return bool(m % 4 or k % 4)


def defines_of(config: VariantConfig, *extra: tuple[str, int]) -> tuple[tuple[str, int], ...]:
    """A step's -D defines: the config's and ``extra``, sorted."""
    return tuple(sorted(tuple(config.defines.items()) + extra))
