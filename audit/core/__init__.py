"""The bottom layer: the mechanism as data (:mod:`.mechanism`), the record of a training
(:mod:`.record`), the datasets it names (:mod:`.data`), the names used everywhere, seeds, input
validation and the observations record (docs/design.md §2)."""
