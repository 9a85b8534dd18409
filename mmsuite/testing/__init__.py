"""What a kernel must pass to be trusted, as a pytest suite for your own kernels.

    pytest --pyargs mmsuite.testing --mmsuite-plugin my_kernels.py

runs every plugin kernel (those of ``--mmsuite-plugin`` files, of ``MMSUITE_PLUGINS`` and of
installed plugins) on the odd shapes below, on every input class, in both layouts, batched
and with non-default alpha and beta, each against the float64 reference and held to its
precision class's tolerance: the checks mmsuite's own ladder passes. ``--mmsuite-kernel
GLOB`` narrows the kernels (built-in ids too, e.g. to check a parent the same way).
"""

from __future__ import annotations

#: (m, n, k): unit, odd, primes, non-multiples of every tile (4, 8, 16, 32, 64, 128), round.
ODD_SHAPES: list[tuple[int, int, int]] = [
    (1, 1, 1),
    (35, 79, 19),
    (2, 3, 5),
    (17, 1, 131),
    (1, 97, 7),
    (67, 67, 67),
    (129, 65, 33),
    (131, 257, 139),
    (64, 64, 64),
    (256, 128, 96),
]
