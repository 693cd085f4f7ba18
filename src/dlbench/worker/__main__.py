"""`python -m dlbench.worker SPEC.json RESULT.json`: run one point (dlbench.worker.main)."""

import sys

from dlbench.worker import main

sys.exit(main())
