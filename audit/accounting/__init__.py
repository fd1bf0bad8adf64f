"""Accountants: adapters from a mechanism to dp_accounting / PRV / PLD accountants
(:mod:`.adapters`), the checker of an accountant against the theory curves (:mod:`.check`) and
its pytest helper (:mod:`.testing`) (docs/design.md §2)."""
