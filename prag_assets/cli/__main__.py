"""`python -m prag_assets.cli ...`: the same as the `prag` command."""

import sys

from prag_assets.cli import main

sys.exit(main())
