#!/usr/bin/env bash
# Set up .venv and run the whole check: lint, formatter, layer contract, type checker,
# then pytest (replay tests included). Extra args go to pytest, e.g. -m "not slow" for
# the quick loop.
source "$(dirname "$0")/_venv.sh"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
bash scripts/lint_imports.sh
bash scripts/typecheck.sh
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
