#!/usr/bin/env bash
# Static checks over all five folders (the package mqbridge) and the tests: ruff (style, imports,
# the folder names are not import names) and mypy.
# Needs the virtualenv of scripts/setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ruff check .
.venv/bin/mypy -p mqbridge
.venv/bin/mypy tests/support  # the test harness, strict too
