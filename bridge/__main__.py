"""`python -m bridge` is the `mqbridge` command."""

import sys

from bridge.cli import main

sys.exit(main())
