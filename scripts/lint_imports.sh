#!/usr/bin/env bash
# The layer contract (pyproject's [tool.importlinter]) checked on a regular install of
# this checkout: the repository keeps docs/design.md's top-level folders and maps them into
# `dreamkeeper.*`, which import-linter cannot follow in an editable install.
set -euo pipefail
cd "$(dirname "$0")/.."
target=$(mktemp -d)
trap 'rm -rf "$target"' EXIT
# setuptools copies into ./build and never empties it: a module moved or deleted since
# the last build would still be installed and checked.
rm -rf build
.venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps --no-compile \
  --target "$target" . >/dev/null 2>&1
(cd "$target" && PYTHONPATH="$target" "$OLDPWD/.venv/bin/lint-imports" --config "$OLDPWD/pyproject.toml")
