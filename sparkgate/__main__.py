import sys

from sparkgate.cli import main

sys.exit(main())
