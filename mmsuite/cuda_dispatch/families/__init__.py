"""The dispatch families, one module each: split-K (:mod:`.splitk`), stream-K
(:mod:`.streamk`, on split-K's tiles), GEMV (:mod:`.gemv`), short K (:mod:`.shortk`) and
dot (:mod:`.dot`). The manifest (:mod:`..variants`) lists them."""
