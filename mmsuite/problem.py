"""The problem spec: one SGEMM instance, C = alpha * A @ B + beta * C0, that feeds every backend."""

from __future__ import annotations

import math
import numbers
import warnings
from dataclasses import dataclass

import numpy as np

LAYOUTS = ("row", "col")
#: Input classes (``--inputs``), each seeded, drawn in ``Problem.inputs``:
#:
#: - ``uniform``: [-1, 1]. ``normal``: standard normal.
#: - ``wide``: a mantissa uniform in [1, 2) times 2^e with e uniform over WIDE_BINADES
#:   binades around 1 and a random sign: dynamic range and cancellation, what a split into
#:   big and small parts or a short accumulator mishandles first.
#: - ``tiny``: |a|, |b| in [2^-64, 2^-63), so every product lies in [2^-128, 2^-126), below
#:   FP32's smallest normal; one sign per row of A and per column of B, so that an output's
#:   terms share a sign and a sum of four or more is normal. A flush to zero returns 0.
#: - ``huge``: |a|, |b| in [2^56, 2^57), products in [2^112, 2^114) (about 1e34), signs as
#:   in ``tiny``: sums stay below FP32's maximum up to K = 2^14; longer, the float64
#:   reference itself leaves FP32's range and the row says so.
#: - ``cancel``: columns of A in pairs (x, -x + r) with |x| in [512, 1024) and |r| in
#:   [0.5, 1), the paired rows of B equal, the pairs shuffled along K: each output is a sum
#:   of large opposite terms that cancel to a small remainder (the odd K's last term small).
#: - ``scaled``: uniform [-1, 1] with row i of A scaled by 2^r_i and column j of B by 2^c_j,
#:   r and c integers uniform in [-40, 40] (C0 by 2^(r_i + c_j)): badly scaled operands.
#: - ``integers``: nonzero integers in [-8, 8]: products and sums are exact in FP32 (up to
#:   K = 2^18), so any error is a bug; the verifier then asks for the exact answer.
#: - ``special``: uniform [-1, 1] with a few entries of A, B and C0 (one per 512 and at
#:   least one) set to NaN, +Inf or -Inf: outputs they reach must be NaN or Inf as IEEE
#:   arithmetic makes them, every other output finite and right.
DISTRIBUTIONS = ("uniform", "normal", "wide", "tiny", "huge", "cancel", "scaled", "integers",
                 "special")
WIDE_BINADES = 24
#: ``scaled``: the largest power of two a row of A or a column of B is scaled by.
SCALED_EXPONENT = 40
#: ``integers``: the largest magnitude drawn; 8 * 8 * K stays exact in FP32 up to K = 2^18.
INTEGER_MAX = 8
#: ``special``: one NaN or Inf per this many entries of each operand (at least one).
SPECIAL_EVERY = 512
FLOAT32_MAX = float(np.finfo(np.float32).max)
INT32_MAX = 2**31 - 1
PROBLEM_FIELDS = ("m", "n", "k", "batch", "layout", "alpha", "beta", "seed")
# Record key of ``Problem.distribution`` (absent: uniform, as in files older than the field).
INPUTS_KEY = "inputs"


@dataclass(frozen=True)
class Problem:
    """One SGEMM problem: shapes, batch, memory layout, scalars, the input seed and the
    inputs' distribution (``DISTRIBUTIONS``).

    A is (batch, m, k), B is (batch, k, n), C is (batch, m, n); the batch axis is
    dropped when ``batch == 1``. ``layout="row"`` stores every matrix row-major
    (C order); ``layout="col"`` stores every matrix column-major (F order), with
    the batch axis outermost.
    """

    m: int
    n: int
    k: int
    batch: int = 1
    layout: str = "row"
    alpha: float = 1.0
    beta: float = 0.0
    seed: int = 0
    distribution: str = "uniform"

    def __post_init__(self) -> None:
        for name in ("m", "n", "k", "batch"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
            size = int(value)
            if size < 1:
                raise ValueError(f"{name} must be a positive integer, got {value}")
            if size > INT32_MAX:  # kernels take their sizes as 32-bit integers
                raise ValueError(f"{name} must be at most {INT32_MAX}, got {value}")
            object.__setattr__(self, name, size)
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {self.layout!r}")
        for name in ("alpha", "beta"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise ValueError(f"{name} must be a finite real number, got {value!r}")
            if not math.isfinite(value):
                raise ValueError(f"{name} must be finite, got {value}")
            scalar = float(value)
            # Kernels take the scalars as float32: a larger value becomes Inf there.
            if abs(scalar) > FLOAT32_MAX:
                raise ValueError(f"{name} must be finite in float32 (|{name}| <= "
                                 f"{FLOAT32_MAX:.4g}), got {value:g}")
            object.__setattr__(self, name, scalar)
        if isinstance(self.seed, bool) or not isinstance(self.seed, numbers.Integral):
            raise ValueError(f"seed must be a non-negative integer, got {self.seed!r}")
        if self.seed < 0:  # numpy's generators take no negative seed
            raise ValueError(f"seed must be a non-negative integer, got {self.seed}")
        object.__setattr__(self, "seed", int(self.seed))
        if self.distribution not in DISTRIBUTIONS:
            raise ValueError(f"inputs must be one of {', '.join(DISTRIBUTIONS)}, "
                             f"got {self.distribution!r}")

    # ------------------------------------------------------------------ sizes
    @property
    def flops(self) -> int:
        """Floating-point operations of the product: 2·m·n·k·batch."""
        return 2 * self.m * self.n * self.k * self.batch

    @property
    def shape_label(self) -> str:
        """The problem as every table, figure and message names it: ``MxNxK``, ``batch B of
        MxNxK``, then what differs from the defaults in brackets (column-major, alpha and
        beta, the input seed)."""
        label = f"{self.m}x{self.n}x{self.k}"
        if self.batch > 1:
            label = f"batch {self.batch} of {label}"
        extras = []
        if self.layout != "row":
            extras.append(f"{self.layout}-major")
        if (self.alpha, self.beta) != (1.0, 0.0):
            extras.append(f"alpha={self.alpha:g} beta={self.beta:g}")
        if self.seed != 0:
            extras.append(f"seed {self.seed}")
        if self.distribution != "uniform":
            extras.append(f"{self.distribution} inputs")
        return label + (f" ({', '.join(extras)})" if extras else "")

    def logical_shape(self, operand: str) -> tuple[int, ...]:
        rows, cols = {"A": (self.m, self.k), "B": (self.k, self.n), "C": (self.m, self.n)}[operand]
        return (rows, cols) if self.batch == 1 else (self.batch, rows, cols)

    @property
    def nbytes(self) -> int:
        """Bytes of A, B and C together in float32."""
        return 4 * self.batch * (self.m * self.k + self.k * self.n + self.m * self.n)

    @property
    def host_bytes(self) -> int:
        """Peak host memory a sweep of this problem needs, in bytes (an upper estimate).

        The float32 inputs stay resident; the float64 reference needs float64
        copies of A, B and C0 plus the product and its scaled sum, and the error scale
        (|A|, |B| and their product); verifying an output holds a float32 copy and two
        float64 arrays of C.
        """
        a, b, c = (self.batch * x for x in (self.m * self.k, self.k * self.n, self.m * self.n))
        return 12 * (a + b + c) + 8 * (a + b) + 40 * c

    def with_distribution(self, distribution: str) -> Problem:
        return Problem(self.m, self.n, self.k, self.batch, self.layout, self.alpha, self.beta,
                       self.seed, distribution)

    # ----------------------------------------------------------------- inputs
    def inputs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Float32 host arrays (A, B, C0) of the problem's input class (``DISTRIBUTIONS``),
        without zeros, fixed by the seed."""
        rng = np.random.default_rng(self.seed)
        shapes = tuple(self.logical_shape(name) for name in "ABC")
        draw = _CLASS_DRAWS.get(self.distribution)
        if draw is None:  # one operand after another: the first three classes' draws
            arrays = tuple(_draw_plain(rng, shape, self.distribution) for shape in shapes)
        else:
            arrays = draw(rng, *shapes)
        a, b, c0 = (_nonzero(values.astype(np.float32)) for values in arrays)
        return to_layout(a, self.layout), to_layout(b, self.layout), to_layout(c0, self.layout)

    @classmethod
    def from_dict(cls, fields: dict) -> Problem:
        """The problem a result record's ``problem`` field holds (``to_dict``'s inverse)."""
        problem = cls(**{name: fields[name] for name in PROBLEM_FIELDS if name in fields})
        distribution = fields.get(INPUTS_KEY, "uniform")
        return problem if distribution == "uniform" else problem.with_distribution(distribution)

    def to_dict(self) -> dict:
        """The problem's fields; ``inputs`` only when not uniform, so that the rows of files
        written before the field existed (all uniform) still match their problems."""
        fields = {
            "m": self.m, "n": self.n, "k": self.k, "batch": self.batch, "layout": self.layout,
            "alpha": self.alpha, "beta": self.beta, "seed": self.seed,
        }
        if self.distribution != "uniform":
            fields["inputs"] = self.distribution
        return fields

Shape = tuple[int, ...]


def _nonzero(values: np.ndarray) -> np.ndarray:
    # Zeros hide unwritten outputs and wrong indexing: nudge them away.
    values[values == 0.0] = np.float32(0.5)
    return values


def _draw_plain(rng: np.random.Generator, shape: Shape, distribution: str) -> np.ndarray:
    if distribution == "normal":
        return rng.standard_normal(size=shape)
    if distribution == "wide":
        exponents = rng.integers(-WIDE_BINADES // 2, WIDE_BINADES // 2, size=shape)
        signs = rng.choice(np.array([-1.0, 1.0]), size=shape)
        return signs * rng.uniform(1.0, 2.0, size=shape) * np.exp2(exponents)
    return rng.uniform(-1.0, 1.0, size=shape)


def _signs(rng: np.random.Generator, shape: Shape) -> np.ndarray:
    return rng.choice(np.array([-1.0, 1.0]), size=shape)


def _binade(rng: np.random.Generator, shape: Shape, exponent: int) -> np.ndarray:
    """Magnitudes uniform in [2^exponent, 2^(exponent + 1))."""
    return rng.uniform(1.0, 2.0, size=shape) * 2.0**exponent


def _one_sign_per_output(rng: np.random.Generator, a_shape: Shape, b_shape: Shape,
                         c_shape: Shape, exponent: int) -> tuple[np.ndarray, ...]:
    """|a|, |b| in one binade, one sign per row of A and per column of B: an output's terms
    share a sign, so its sum grows with K rather than cancelling."""
    row_signs = _signs(rng, (*a_shape[:-1], 1))
    column_signs = _signs(rng, (*b_shape[:-2], 1, b_shape[-1]))
    a = row_signs * _binade(rng, a_shape, exponent)
    b = column_signs * _binade(rng, b_shape, exponent)
    # C0 the size of a sum of a few products, so that beta * C0 neither vanishes nor rules.
    c0 = _signs(rng, c_shape) * _binade(rng, c_shape, 2 * exponent + 2)
    return a, b, c0


def _draw_tiny(rng: np.random.Generator, a_shape: Shape, b_shape: Shape,
               c_shape: Shape) -> tuple[np.ndarray, ...]:
    return _one_sign_per_output(rng, a_shape, b_shape, c_shape, -64)


def _draw_huge(rng: np.random.Generator, a_shape: Shape, b_shape: Shape,
               c_shape: Shape) -> tuple[np.ndarray, ...]:
    return _one_sign_per_output(rng, a_shape, b_shape, c_shape, 56)


def _draw_cancel(rng: np.random.Generator, a_shape: Shape, b_shape: Shape,
                 c_shape: Shape) -> tuple[np.ndarray, ...]:
    k = a_shape[-1]
    pairs = k // 2
    big = _signs(rng, (*a_shape[:-1], pairs)) * _binade(rng, (*a_shape[:-1], pairs), 9)
    remainder = _signs(rng, big.shape) * _binade(rng, big.shape, -1)
    # The odd K's last column is small: it adds to the remainder, not to the big terms.
    last = rng.uniform(-1.0, 1.0, size=(*a_shape[:-1], k - 2 * pairs))
    # Rounded to float32 here, so that the pair's sum in float32 is what the reference sees.
    partner = (-big.astype(np.float32) + remainder).astype(np.float32)
    a = np.concatenate([big, partner, last], axis=-1)
    rows = rng.uniform(-1.0, 1.0, size=(*b_shape[:-2], pairs, b_shape[-1]))
    b = np.concatenate([rows, rows, rng.uniform(-1.0, 1.0, size=(
        *b_shape[:-2], k - 2 * pairs, b_shape[-1]))], axis=-2)
    # Shuffled along K (the same way in A and B): partners are not neighbours in a tile.
    order = rng.permutation(k)
    return a[..., order], b[..., order, :], rng.uniform(-1.0, 1.0, size=c_shape)


def _draw_scaled(rng: np.random.Generator, a_shape: Shape, b_shape: Shape,
                 c_shape: Shape) -> tuple[np.ndarray, ...]:
    row_exponents = rng.integers(-SCALED_EXPONENT, SCALED_EXPONENT + 1, size=(*a_shape[:-1], 1))
    column_exponents = rng.integers(-SCALED_EXPONENT, SCALED_EXPONENT + 1,
                                    size=(*b_shape[:-2], 1, b_shape[-1]))
    a = rng.uniform(-1.0, 1.0, size=a_shape) * np.exp2(row_exponents)
    b = rng.uniform(-1.0, 1.0, size=b_shape) * np.exp2(column_exponents)
    c0 = rng.uniform(-1.0, 1.0, size=c_shape) * np.exp2(row_exponents + column_exponents)
    return a, b, c0


def _draw_integers(rng: np.random.Generator, a_shape: Shape, b_shape: Shape,
                   c_shape: Shape) -> tuple[np.ndarray, ...]:
    return tuple(_signs(rng, shape) * rng.integers(1, INTEGER_MAX + 1, size=shape)
                 for shape in (a_shape, b_shape, c_shape))


def _draw_special(rng: np.random.Generator, a_shape: Shape, b_shape: Shape,
                  c_shape: Shape) -> tuple[np.ndarray, ...]:
    arrays = tuple(rng.uniform(-1.0, 1.0, size=shape) for shape in (a_shape, b_shape, c_shape))
    for values in arrays:
        count = 1 + values.size // SPECIAL_EVERY
        where = rng.choice(values.size, size=count, replace=False)
        values.flat[where] = rng.choice(np.array([np.nan, np.inf, -np.inf]), size=count)
    return arrays


_CLASS_DRAWS = {"tiny": _draw_tiny, "huge": _draw_huge, "cancel": _draw_cancel,
                "scaled": _draw_scaled, "integers": _draw_integers, "special": _draw_special}


def label_of(fields: dict) -> str:
    """The ``shape_label`` of the problem a result record's ``problem`` field holds."""
    return Problem.from_dict(fields).shape_label


def to_layout(array: np.ndarray, layout: str) -> np.ndarray:
    """The same logical values stored row-major (C order) or column-major per matrix."""
    if layout == "row":
        return np.ascontiguousarray(array)
    # Column-major per matrix with the batch outermost: transpose the last two
    # axes, make that contiguous, and view it back with the logical axes.
    return np.ascontiguousarray(np.swapaxes(array, -1, -2)).swapaxes(-1, -2)


def parse_shape(text: str) -> tuple[int, int, int]:
    """Parse ``MxNxK`` (or a single ``S`` for a cube) into three positive sizes."""
    if not text.strip():
        raise ValueError("shape is empty; expected MxNxK (e.g. 512x512x512)")
    parts = text.lower().replace("*", "x").split("x")
    if len(parts) == 1:
        parts = parts * 3
    if len(parts) != 3:
        raise ValueError(f"shape must look like MxNxK (e.g. 512x512x512), got {text!r}")
    try:
        m, n, k = (int(p) for p in parts)
    except ValueError:
        raise ValueError(f"shape must look like MxNxK with integer sizes, got {text!r}") from None
    if min(m, n, k) < 1:
        raise ValueError(f"shape sizes must be positive, got {text!r}")
    return m, n, k


#: A range of sizes gives at most this many: a typo in its step is not a week of runs.
MAX_RANGE_SIZES = 256


def parse_size_range(text: str) -> list[int]:
    """The sizes of ``START:STOP[:STEP]``, STOP included when a step lands on it, as NVBench
    and Google Benchmark users write a sweep: ``128:4096:x2`` multiplies by 2 (``x2`` is the
    default step), ``128:1024:128`` (or ``+128``) adds 128."""
    parts = text.strip().split(":")
    if len(parts) not in (2, 3):
        raise ValueError(f"a range is START:STOP[:STEP] (e.g. 128:4096:x2 or 128:1024:128), "
                         f"got {text!r}")
    step = parts[2].strip().lower() if len(parts) == 3 else "x2"
    geometric = step.startswith("x")
    try:
        start, stop = int(parts[0]), int(parts[1])
        by = int(step.lstrip("x+"))
    except ValueError:
        raise ValueError(f"a range's START, STOP and STEP are integers (STEP xF multiplies, "
                         f"N or +N adds), got {text!r}") from None
    if start < 1 or stop < start:
        raise ValueError(f"range {text!r} is empty: it needs 1 <= START <= STOP")
    if by < (2 if geometric else 1):
        raise ValueError(f"range {text!r} never advances: its step must be at least "
                         + ("x2" if geometric else "1"))
    sizes = [start]
    while (nxt := sizes[-1] * by if geometric else sizes[-1] + by) <= stop:
        sizes.append(nxt)
        if len(sizes) > MAX_RANGE_SIZES:
            raise ValueError(f"range {text!r} gives more than {MAX_RANGE_SIZES} sizes; "
                             "take a larger step")
    return sizes


# --------------------------------------------------------------------- presets
SWEEP_SIZES = (128, 256, 512, 1024, 2048, 4096)

PRESETS: dict[str, list[Problem]] = {
    # Square 2048.
    "square2048": [Problem(2048, 2048, 2048)],
    # A 2000x2000 matrix times a 2000x6000 one: a wide product.
    "wide2000x6000": [Problem(2000, 6000, 2000)],
    # Square 4096.
    "square4096": [Problem(4096, 4096, 4096)],
    # A batch of 100 products of 1000x1000 matrices.
    "batch100": [Problem(1000, 1000, 1000, batch=100)],
    # Square sweep for speedup-vs-size plots.
    "sweep": [Problem(s, s, s) for s in SWEEP_SIZES],
}

PRESET_HELP = {
    "square2048": "2048^3",
    "wide2000x6000": "2000x2000 by 2000x6000",
    "square4096": "4096^3",
    "batch100": "batch 100 of 1000^3",
    "sweep": "square sweep " + ", ".join(str(s) for s in SWEEP_SIZES),
}

#: The presets' first names, numbered after the documents they came from; they still work
#: for a release, with a warning, and appear in no help.
DEPRECATED_PRESETS = {"seed000": "square2048", "seed001": "wide2000x6000",
                      "seed002": "square4096", "seed003": "batch100"}


def preset_deprecation(name: str) -> str:
    """The one-line warning for an old preset name."""
    return (f"preset {name} is deprecated and goes in the next release; "
            f"use {DEPRECATED_PRESETS[name]}")


def preset(name: str) -> list[Problem]:
    """The problems of a named preset (see ``PRESETS``); an old name warns and still works."""
    if name in DEPRECATED_PRESETS:
        warnings.warn(preset_deprecation(name), DeprecationWarning, stacklevel=2)
        name = DEPRECATED_PRESETS[name]
    try:
        return list(PRESETS[name])
    except KeyError:
        raise KeyError(f"unknown preset {name!r}; choose from {', '.join(PRESETS)}") from None
