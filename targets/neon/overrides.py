"""Measured conv decomposition overrides per board: ``{board: {conv signature: decomposition}}``.

The chooser consults this table before its cost model. Regenerate a board's entry on that board
with ``python benchmarks/neon_conv_chooser.py --board NAME --write`` (it rewrites the literal
below); signatures come from ``chooser.signature``.
"""

OVERRIDES = {'host': {'n1c128h28w28k128r3s3g1st1x1d1x1p1x1': 'winograd',
          'n1c16h56w56k16r3s3g1st1x1d1x1p1x1': 'winograd',
          'n1c256h14w14k256r3s3g1st1x1d1x1p1x1': 'winograd',
          'n1c320h16w16k320r3s3g1st1x1d1x1p1x1': 'winograd',
          'n1c32h112w112k32r3s3g32st1x1d1x1p1x1': 'depthwise',
          'n1c384h14w14k384r3s3g384st1x1d1x1p1x1': 'depthwise',
          'n1c3h112w112k32r3s3g1st1x1d1x1p1x1': 'im2col',
          'n1c512h7w7k512r3s3g1st1x1d1x1p1x1': 'im2col',
          'n1c64h56w56k64r3s3g1st1x1d1x1p1x1': 'winograd',
          'n1c96h56w56k96r3s3g96st2x2d1x1p1x1': 'depthwise',
          'n4c32h28w28k32r3s3g1st1x1d1x1p1x1': 'winograd'}}
