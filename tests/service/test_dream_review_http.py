"""Approval over HTTP: a real `dreamkeeper serve` with the scripted LLM; the agent's
own setting makes its cycle wait; a rejected merge is never applied, an approved one is."""

from __future__ import annotations

import time

import pytest

from dreamkeeper.stores.dream_state.dream_settings import write_approval
from dreamkeeper.stores.files.memory_store import FileMemoryStore
from tests.service.conftest import start_serve, stop_serve
from tests.workflows.test_dream_approval import CH, HV1, HV2, P1, P2, _reply, _seed

pytestmark = pytest.mark.slow  # a serve process of its own


def _until(probe):
    while True:  # no time is asserted: the workflow gets there when it gets there
        got = probe()
        if got is not None:
            return got
        time.sleep(0.3)


def test_pending_approve_and_reject_over_http(temporal_env, tmp_path, llm):
    agent = "apr"
    store = _seed(type("S", (), {"data_dir": tmp_path})(), agent)
    write_approval(store.documents, "all")
    llm.replies.append(_reply())
    served = start_serve(
        temporal_env,
        tmp_path,
        DREAMKEEPER_LLM_BASE_URL=llm.base_url,
        DREAMKEEPER_LLM_MODEL="scripted",
    )
    try:
        with served.client() as client:
            assert client.post(f"/v1/agents/{agent}/dream").status_code == 202

            def pending():
                answer = client.get(f"/v1/agents/{agent}/dream/pending")
                return (
                    answer.json()
                    if answer.status_code == 200 and answer.json()["pending"]
                    else None
                )

            state = _until(pending)
            keys = {p["key"]: p["ids"] for p in state["pending"]}
            hv = next(k for k, ids in keys.items() if ids == [HV1, HV2])
            bad = client.post(f"/v1/agents/{agent}/dream/approve", json={"keys": ["merge:nope"]})
            assert bad.status_code == 400 and "not pending" in bad.text
            rejected = client.post(f"/v1/agents/{agent}/dream/reject", json={"keys": [hv]})
            assert rejected.status_code == 200 and rejected.json()["rejected"] == [hv]
            approved = client.post(f"/v1/agents/{agent}/dream/approve", json={}).json()
            assert approved["pending"] == [] and hv not in approved["approved"]

            def done():
                status = client.get(f"/v1/agents/{agent}/dream").json()
                return status if status["status"] == "COMPLETED" else None

            result = _until(done)["result"]["consolidation"]
        assert [m["sources"] for m in result["merged"]] == [[P1, P2]]
        live = {e.id for e in FileMemoryStore(tmp_path, agent).entries()}
        assert {HV1, HV2} <= live and P1 not in live
        assert CH not in live or result["deferred_by_budget"]
    finally:
        stop_serve(served)
