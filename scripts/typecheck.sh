#!/usr/bin/env bash
# mypy on the `dreamkeeper` package as installed (a regular install of this checkout, in
# a temp directory): the repository's folders are mapped into `dreamkeeper.*`, which
# mypy cannot follow through an editable install. Paths are reported as in the repo.
# The development harness (tests/harness/, not installed) is checked beside it.
set -euo pipefail
cd "$(dirname "$0")/.."
target=$(mktemp -d)
trap 'rm -rf "$target"' EXIT
# setuptools copies into ./build and never empties it: a module moved or deleted since
# the last build would still be installed and checked.
rm -rf build
.venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps --no-compile \
  --target "$target" . >/dev/null 2>&1
mkdir -p "$target/tests"
cp tests/__init__.py "$target/tests/"
cp -r tests/harness "$target/tests/harness"
set +e
(cd "$target" && "$OLDPWD/.venv/bin/mypy" --config-file "$OLDPWD/pyproject.toml" \
  -p dreamkeeper -p tests.harness) \
  | sed -E 's#^dreamkeeper/(core|client|stores|policies|activities|workflows|worker|service|cli|agent)/#\1/#'
exit "${PIPESTATUS[0]}"
