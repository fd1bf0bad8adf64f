"""Training: the DP-SGD engine and its routes (:mod:`.engine`, :mod:`.compiled`,
:mod:`.func_engine`), models, canaries, the mechanism-level simulator, and the engine's shards of
trainings (:mod:`.trials`) (docs/design.md §2)."""
