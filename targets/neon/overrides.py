"""Measured conv decomposition overrides per board: ``{board: {conv signature: decomposition}}``.

The chooser consults this table before its cost model. Regenerate a board's entry on that board
with ``python benchmarks/neon_conv_chooser.py --board NAME --write`` (it rewrites the literal
below); signatures come from ``chooser.signature``.
"""

OVERRIDES = {}
