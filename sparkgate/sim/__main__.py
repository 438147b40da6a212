"""`python -m sparkgate.sim <the engine's argv>`."""

import sys

from sparkgate.sim.main import main

sys.exit(main())
