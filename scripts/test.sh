#!/usr/bin/env bash
# Set up .venv and run the whole test suite (lint, then pytest). Extra args go to pytest.
source "$(dirname "$0")/_venv.sh"
.venv/bin/ruff check .
set +e
.venv/bin/python -m pytest "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  # pytest's "no tests collected": for this project that means a broken checkout or
  # filter, never success.
  echo "pytest collected no tests; treating that as a failure" >&2
  exit 1
fi
exit "$rc"
