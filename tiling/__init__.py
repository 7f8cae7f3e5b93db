"""edgeops.tiling: iteration spaces of operators, the ``Tiling`` value, legality, search, bounds."""
