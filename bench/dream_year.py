"""A year of dream cycles against an adversarial LLM: see dreamkeeper.testing.dream_year.

.venv/bin/python bench/dream_year.py [--cycles 730]
"""

from dreamkeeper.testing.dream_year import cli

if __name__ == "__main__":
    raise SystemExit(cli())
