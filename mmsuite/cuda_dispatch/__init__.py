"""The CUDA dispatcher: what rungs 21-24 launch for each problem, and how it is tuned.

- :mod:`.device`: the GPU's facts in one typed form, read in one place;
- :mod:`.variants`: the one table of compiled variants (split-K tiles, stream-K
  tiles, GEMV kernels), their entries, and which candidate plans apply where;
- :mod:`.model`: the modelled time of every candidate, with parameters fitted
  per GPU model from measurements;
- :mod:`.tuning_file`: the per-device files of tuned entries and fitted models;
- :mod:`.planners`: the callables the catalogue names, from a problem to a plan;
- :mod:`.search`: ``mmsuite tune``'s search and ``--fit-model``'s measurements.
"""
