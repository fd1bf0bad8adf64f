"""Plug-in training implementations: the contract (:mod:`.contract`) and the built-ins
(:mod:`.opacus`, :mod:`.broken`) (docs/design.md §2)."""
