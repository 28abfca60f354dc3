"""The year benchmark's 20-cycle variant: real `Dream` workflows on the dev server, a real
worker, and the adversarial LLM over HTTP. Nothing may be lost except by an ephemeral
prune of a below-floor entry, and nothing hard-deleted before retention."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from dreamkeeper.core.settings import LLMSettings, StoreSettings
from dreamkeeper.testing.scripted_llm import ScriptedLLM
from dreamkeeper.worker.temporal_worker import build_worker
from tests.harness.adversary import Adversary
from tests.harness.dream_year import run_year

pytestmark = pytest.mark.slow  # twenty dream cycles


async def test_twenty_dream_cycles_against_an_adversarial_llm_lose_nothing(temporal_env, tmp_path):
    adversary = Adversary(seed=7)
    llm = ScriptedLLM(responder=adversary)
    queue = f"year-{uuid.uuid4().hex[:8]}"
    try:
        with ThreadPoolExecutor(max_workers=4) as executor:
            worker = build_worker(
                temporal_env.client,
                StoreSettings(data_dir=tmp_path),
                task_queue=queue,
                executor=executor,
                llm=LLMSettings(base_url=llm.base_url, model="adversary", timeout_seconds=30),
            )
            async with worker:
                report = await run_year(
                    temporal_env.client, queue, tmp_path, adversary, cycles=20, corpus=150, seed=7
                )
    finally:
        llm.close()
    assert report.high_value_lost == []
    assert report.other_lost == []
    assert report.rejected_sources_pruned == []
    assert report.early_purges == [] and report.vanished == []
    # The run attacked, and the safeguards are what held: not a quiet LLM.
    tried = report.adversary
    assert tried.get("lossy merges", 0) > 0 and tried.get("prunes of high-value entries", 0) > 0
    assert tried.get("hallucinated ids", 0) > 0
    assert report.rejected > 0 and report.protected > 0 and report.ignored_ids > 0
    assert report.merges > 0  # honest merges still go through
    assert len(report.live) == 20 and report.steady_withheld > 50.0
