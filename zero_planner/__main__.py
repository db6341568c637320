"""`python -m zero_planner ...` is `zero-plan ...`."""

import sys

from zero_planner.cli import main

sys.exit(main())
