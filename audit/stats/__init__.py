"""Statistics: the two-sample (multi-run) bounds, verdicts and ROC (:mod:`.binary`), the
one-run bounds (:mod:`.one_run`) and score files (:mod:`.score_files`) (docs/design.md §2)."""
