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
# A hard limit around the whole run: pytest-timeout covers each test, but not a process
# that hangs at exit after printing its summary (a thread that never ends).
limit=()
if command -v timeout >/dev/null 2>&1; then  # coreutils; absent on a stock macOS
  limit=(timeout --kill-after=30 "${DREAMKEEPER_TEST_HARD_TIMEOUT:-3300}")
fi
${limit[@]+"${limit[@]}"} .venv/bin/python -m pytest "$@"
rc=$?
set -e
if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
  echo "pytest did not finish within ${DREAMKEEPER_TEST_HARD_TIMEOUT:-3300} s; treating that as a failure" >&2
  exit 1
fi
if [ "$rc" -eq 5 ]; then
  # pytest's "no tests collected": for this project that means a broken checkout or
  # filter, never success.
  echo "pytest collected no tests; treating that as a failure" >&2
  exit 1
fi
exit "$rc"
