"""Fuzz every surface that reads hostile input, and count what happened.

Runs generated inputs (the hypothesis strategies of `tests/harness/hostile/`, seeded, without
shrinking) through each surface — CLI argv, entry files on disk (with links, FIFOs and
hostile JSON), journal lines, the vocabulary file, environment settings, LLM replies to
enrichment, consolidation, repair and preference inference, working-memory segment
files, conversation session files, conversation-log lines, the clusters file, import
files and `dream undo` run ids — in a
fresh sandbox each, and prints per surface: inputs, refused, accepted, uncaught
exceptions, writes outside the agent's directory and unintended disk changes (a refused
input that changed the agent's directory). Exit 0 when the last three are 0 everywhere.

    .venv/bin/python bench/fuzz.py                    # 12,000 inputs (800 a surface)
    .venv/bin/python bench/fuzz.py --per-surface 100 --seed 7 --only "LLM"
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections import Counter

import _repo_root  # noqa: F401  (puts the repo root on sys.path for tests.harness)
from hypothesis import HealthCheck, Phase, given, seed, settings

from tests.harness.hostile import SURFACES, Outcome, Surface, check


def fuzz(surface: Surface, n: int, seed_value: int, failures: list[str]) -> Counter:
    counts: Counter = Counter()

    @seed(seed_value)
    @settings(
        max_examples=n,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(surface.strategy)
    def body(example: object) -> None:
        outcome: Outcome = check(surface, example)
        counts["inputs"] += 1
        counts["refused" if outcome.refused else "accepted"] += 1
        if outcome.error:
            counts["uncaught"] += 1
        counts["outside"] += bool(outcome.outside_writes)
        counts["unintended"] += bool(outcome.unintended)
        if not outcome.ok and len(failures) < 40:
            failures.append(
                f"{surface.name}: {outcome.error or ''} outside="
                f"{outcome.outside_writes[:3]} unintended={outcome.unintended[:3]} "
                f"input={example!r:.300}"
            )

    body()
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-surface", type=int, default=800)
    parser.add_argument("--seed", type=int, default=20260101)
    parser.add_argument("--only", help="run the surfaces whose name contains this")
    args = parser.parse_args()
    logging.disable(logging.CRITICAL)  # the refusals log warnings by design
    surfaces = [s for s in SURFACES if not args.only or args.only.lower() in s.name.lower()]
    failures: list[str] = []
    header = (
        f"{'surface':34} {'inputs':>7} {'refused':>8} {'accepted':>9} {'uncaught':>9} "
        f"{'outside':>8} {'unintended':>11} {'s':>6}"
    )
    print(header)
    print("-" * len(header))
    total: Counter = Counter()
    for index, surface in enumerate(surfaces):
        start = time.perf_counter()
        counts = fuzz(surface, args.per_surface, args.seed + index, failures)
        total.update(counts)
        print(
            f"{surface.name:34} {counts['inputs']:>7} {counts['refused']:>8} "
            f"{counts['accepted']:>9} {counts['uncaught']:>9} {counts['outside']:>8} "
            f"{counts['unintended']:>11} {time.perf_counter() - start:>6.1f}",
            flush=True,
        )
    print("-" * len(header))
    print(
        f"{'total':34} {total['inputs']:>7} {total['refused']:>8} {total['accepted']:>9} "
        f"{total['uncaught']:>9} {total['outside']:>8} {total['unintended']:>11}"
    )
    for line in failures:
        print("FAIL", line)
    ok = total["uncaught"] == total["outside"] == total["unintended"] == 0
    print(
        "all targets held (0 uncaught, 0 writes outside, 0 unintended changes)"
        if ok
        else "TARGETS MISSED"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
