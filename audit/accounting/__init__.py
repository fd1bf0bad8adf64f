"""Accountants: adapters from a mechanism to dp_accounting / PRV / PLD accountants
(:mod:`.adapters`), the checker of an accountant against the theory curves (:mod:`.check`), the
neighbouring relations' theory (:mod:`.adjacency`), the proven bracket in Python and its disk
cache (:mod:`.reference`), the pytest helper (:mod:`.testing`) and plugin (:mod:`.pytest_plugin`)
(docs/design.md §2, §11)."""
