"""A run: the spec, the run folder and its store, shard fingerprints, resources, sizing,
scoring, claims, planning, the one-run shards (:mod:`.one_run_trials`), and the runner that
ties them (docs/design.md §2)."""
