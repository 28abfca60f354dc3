"""Helpers shared by tests."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

from rank_bm25 import BM25Okapi


def tree_snapshot(root) -> dict[str, bytes]:
    """Every file under root with its bytes: to prove a rejected call changed nothing."""
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


class LuceneBM25(BM25Okapi):
    """rank_bm25's BM25Okapi with Lucene's idf, ln(1 + (N − n + 0.5) / (n + 0.5)): the
    oracle the BM25 index is checked against (BM25Okapi's own idf goes negative)."""

    def _calc_idf(self, nd: dict[str, int]) -> None:
        for word, freq in nd.items():
            self.idf[word] = math.log(1 + (self.corpus_size - freq + 0.5) / (freq + 0.5))


def build_wheel(project: Path, out: Path) -> Path:
    """The dreamkeeper wheel built offline from `project` (no build isolation, no index:
    what the venv's setuptools makes of exactly that folder)."""
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--disable-pip-version-check",
            "--quiet",
            "-w",
            str(out),
            str(project),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    # e.g. "package directory 'dreamkeeper' does not exist": a folder not copied.
    assert built.returncode == 0, (built.stdout + built.stderr)[-3000:]
    (wheel,) = out.glob("dreamkeeper-*.whl")
    return wheel
