"""`python -m sparkgate_sim <the engine's argv>`."""

import sys

from sparkgate_sim.main import main

sys.exit(main())
