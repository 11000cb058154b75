#!/usr/bin/env bash
# Static checks over all five folders (the package mqbridge) and the tests: ruff (style, imports,
# and the one-way layers: each folder's .ruff.toml bans what it may not import) and mypy.
# Needs the virtualenv of scripts/setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ruff check .
.venv/bin/mypy -p mqbridge
.venv/bin/mypy tests/support  # the test harness, strict too
