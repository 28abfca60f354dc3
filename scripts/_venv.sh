# Sourced by run.sh and test.sh: find Python >= 3.11, create .venv, install Dreamkeeper.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

find_python() {
  for candidate in "${PYTHON:-}" python3.13 python3.12 python3.11 python3 python; do
    [ -n "$candidate" ] || continue
    if command -v "$candidate" >/dev/null 2>&1 &&
      "$candidate" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
      echo "$candidate"
      return 0
    fi
  done
  echo "Dreamkeeper needs Python 3.11 or newer (set PYTHON=/path/to/python3.11)" >&2
  return 1
}

if [ ! -x .venv/bin/python ]; then
  py=$(find_python)
  echo "creating .venv with $("$py" --version)" >&2
  "$py" -m venv .venv
fi
# Reinstall only when the project definition changed since the last install.
stamp=.venv/.dreamkeeper-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "installing Dreamkeeper and its dependencies into .venv" >&2
  .venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip >/dev/null 2>&1 || true
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[dev,local-embeddings]"
  touch "$stamp"
fi
