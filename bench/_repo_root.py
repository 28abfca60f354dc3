"""Puts the repository root on sys.path, so a bench script run as
`.venv/bin/python bench/x.py` (which puts only bench/ there) can import the development
harness in tests/harness/, which is not installed. Import it before any `tests.` import."""

import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[1])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
