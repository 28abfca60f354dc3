"""A year of dream cycles against an adversarial LLM: see tests/harness/dream_year.py.

.venv/bin/python bench/dream_year.py [--cycles 730]
"""

import _repo_root  # noqa: F401  (puts the repo root on sys.path for tests.harness)

from tests.harness.dream_year import cli

if __name__ == "__main__":
    raise SystemExit(cli())
