"""A run: the spec, the run folder and its store, shard fingerprints, resources, sizing,
scoring, claims, planning, the one-run shards (:mod:`.one_run_trials`), the runner that
ties them, and the typed results of every cell (:mod:`.results`, computed by :mod:`.summary`)
(docs/design.md §2)."""
