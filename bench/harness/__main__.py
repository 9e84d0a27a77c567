"""`python -m bench.harness noop|client ...`: the no-op server and the Python load generator,
each started by the harness in a process of its own."""

import sys

from bench.harness.processes import main

sys.exit(main())
