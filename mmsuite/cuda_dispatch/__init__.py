"""The CUDA dispatcher: what rungs 21-24, 27 and 30 launch for each problem.

- :mod:`.families`: one module per kernel family (split-K, stream-K, GEMV, short K,
  dot), each with its configs, what it offers, its applicability, cost and launches,
  behind :class:`.family.Family`;
- :mod:`.variants`: the manifest, the list of families and the table of their variants,
  and the one place that lists the candidates of a problem;
- :mod:`.occupancy`, :mod:`.costs`, :mod:`.slices`: the shared machinery (an SM's limits,
  the model's parameters and shared cost terms, the sums of the K slices);
- :mod:`.model`: the modelled time of every candidate, and its fit per GPU model;
- :mod:`.tuning_file`: the per-device files of tuned entries and fitted models;
- :mod:`.planners`: the callables the catalogue names, from a problem to a plan.

``mmsuite tune``'s search, which measures plans on the GPU, lives above the engine
(:mod:`mmsuite.tuner`).
"""
