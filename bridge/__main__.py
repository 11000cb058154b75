"""`python -m mqbridge` is the `mqbridge` command."""

import sys

from mqbridge.cli import main

sys.exit(main())
