"""``python -m dlbench`` runs the CLI."""

import sys

from dlbench.cli import main

sys.exit(main())
