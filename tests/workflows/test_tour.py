"""`dreamkeeper dev --demo`'s tour, run against a real worker: what the quickstart shows."""

from __future__ import annotations

from dreamkeeper.cli.tour import tour


async def test_the_quickstart_tour_runs_every_step(worker, capsys):
    client, queue, settings = worker
    await tour(client, settings, queue, ui="http://localhost:8233")
    out = capsys.readouterr().out
    assert out.count("saved [") == 3
    assert "User lives in Chicago" in out.split("search 'chicago timezone':", 1)[1]
    context = out.split("memory context an agent's LLM gets", 1)[1]
    assert "[system] Recalled from long-term memory" in context
    assert "session/demo-session/draft_reply: expires in" in context
    assert "Friday works for me" not in context  # the inventory never shows content
    assert "archived [" in out and "restored [" in out
    # Three fresh notes and no LLM: every pass is idle, and the line says so.
    assert "dream cycle: purged 0;" in out
    assert "nothing to do for purge, embedding backfill, consolidation" in out


async def test_a_second_tour_on_the_same_data_runs_every_step_too(worker, capsys):
    """README: a second run finds the first run's memories. Its saves are the same saves
    (same keys), so its archive and restore act on live entries, not dedup's leftovers."""
    client, queue, settings = worker
    await tour(client, settings, queue, ui="http://localhost:8233")
    first = capsys.readouterr().out
    await tour(client, settings, queue, ui="http://localhost:8233")
    second = capsys.readouterr().out
    ids = [
        line.split("[", 1)[1].split("]", 1)[0] for line in first.splitlines() if "saved [" in line
    ]
    assert all(f"saved [{i}]" in second for i in ids)
    assert "restored [" in second and "dream cycle: purged 0;" in second
