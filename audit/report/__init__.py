"""Reports: the multi-run summary, report and plots (:mod:`.multi_run`), the one-run report
(:mod:`.one_run`) and number formatting (:mod:`.formatting`) (docs/design.md §2)."""
