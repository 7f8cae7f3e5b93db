import sys

from edgeops.cli import main

sys.exit(main())
