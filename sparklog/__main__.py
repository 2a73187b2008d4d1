"""`python -m sparklog ...` (see `sparklog.cli`)."""

import sys

from sparklog.cli import main

sys.exit(main())
