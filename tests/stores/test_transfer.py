"""Export and import: the round trip, idempotence, dry runs, refused versions and bad
lines (nothing written), through the CLI and the module."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dreamkeeper.cli.main import main
from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.stores.files.memory_store import FileMemoryStore
from dreamkeeper.stores.longterm.transfer import (
    FORMAT,
    FORMAT_VERSION,
    apply_import,
    export_lines,
    plan_import,
    read_export,
)
from dreamkeeper.stores.search.query import search

FACTS = [
    ("User lives in Chicago (America/Chicago, UTC-6).", "user-preferences/timezone", 0.9),
    ("User prefers short answers with code first.", "user-preferences/style", 0.7),
    ("Don't use search_files for content search; use grep.", "anti-patterns/files", 0.8),
    ("The Blazor online class runs on Fridays at 12:30.", "project-context/blazor", 0.6),
    ("Deploys happen on Tuesdays after the standup.", "project-context/deploys", 0.5),
]
QUERIES = ["chicago timezone", "short answers", "grep content", "blazor friday", "deploy", None]


def _seeded(root: Path, agent: str = "src") -> FileMemoryStore:
    store = FileMemoryStore(root, agent)
    for content, category, importance in FACTS:
        store.create(
            content,
            category=category,
            importance=importance,
            tags=["seed"],
            metadata={"source": "user"},
        )
    archived = store.create("An obsolete fact about the old office.", category="old")
    store.archive(archived.id, "deleted by agent tool")
    return store


def _comparable(store: FileMemoryStore) -> list[dict]:
    return [
        e.model_dump(mode="json", exclude={"revision", "applied_ops"})
        for e in sorted(store.entries(include_archived=True), key=lambda e: e.id)
    ]


def _cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def test_round_trip_same_entries_and_same_search_results(tmp_path):
    source = _seeded(tmp_path / "a")
    path = tmp_path / "export.jsonl"
    code, _, err = _cli(
        "--data",
        str(tmp_path / "a"),
        "--agent",
        "src",
        "export",
        "-o",
        str(path),
        "--include-archived",
    )
    assert code == 0 and "exported 6" in err
    code, out, _ = _cli("--data", str(tmp_path / "b"), "--agent", "dst", "import", str(path))
    assert code == 0 and out.startswith("created 6, unchanged 0")

    target = FileMemoryStore(tmp_path / "b", "dst")
    assert _comparable(target) == _comparable(source)
    for query in QUERIES:
        expected = [(h.entry.id, h.score) for h in search(source, query, limit=10)]
        assert [(h.entry.id, h.score) for h in search(target, query, limit=10)] == expected


def test_export_without_archived_leaves_them_out(tmp_path):
    source = _seeded(tmp_path)
    lines = list(export_lines(source))
    header = json.loads(lines[0])
    assert header["format"] == FORMAT and header["version"] == FORMAT_VERSION
    assert header["entries"] == 5 == len(lines) - 1
    assert all(json.loads(line)["entry"]["archivedAt"] is None for line in lines[1:])


def test_import_is_idempotent_and_dry_run_writes_nothing(tmp_path):
    source = _seeded(tmp_path / "a")
    parsed = read_export(export_lines(source, include_archived=True))
    target = FileMemoryStore(tmp_path / "b", "dst")
    plan = plan_import(target, parsed)
    assert len(plan.create) == 6 and not plan.unchanged and not plan.conflicts
    assert target.entries(include_archived=True) == []
    assert not (tmp_path / "b" / "agents" / "dst" / "memory").exists() or not list(
        (tmp_path / "b" / "agents" / "dst" / "memory").rglob("*.json")
    )
    assert len(apply_import(target, parsed).create) == 6
    again = apply_import(target, parsed)
    assert again.create == [] and len(again.unchanged) == 6
    assert len(plan_import(target, parsed).unchanged) == 6


def test_dry_run_through_the_cli_lists_what_would_change(tmp_path):
    source = _seeded(tmp_path / "a")
    path = tmp_path / "e.jsonl"
    path.write_text("\n".join(export_lines(source)) + "\n")
    existing = FileMemoryStore(tmp_path / "b", "dst")
    first = json.loads(path.read_text().splitlines()[1])["entry"]
    existing.create("other content under the same id", entry_id=first["id"])
    code, out, _ = _cli(
        "--data", str(tmp_path / "b"), "--agent", "dst", "import", str(path), "--dry-run"
    )
    assert code == 0
    assert out.startswith("would create 4, unchanged 0 (already here), conflicts 1")
    assert f"! {first['id']} (conflict)" in out
    assert len(FileMemoryStore(tmp_path / "b", "dst").entries()) == 1


def test_another_format_version_is_refused_with_a_clear_message(tmp_path):
    source = _seeded(tmp_path / "a")
    lines = list(export_lines(source))
    header = json.loads(lines[0])
    header["version"] = 2
    path = tmp_path / "v2.jsonl"
    path.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")
    code, _, err = _cli("--data", str(tmp_path / "b"), "--agent", "dst", "import", str(path))
    assert code == 2
    assert "export format version 2 is not supported" in err
    assert FileMemoryStore(tmp_path / "b", "dst").entries() == []


def test_a_file_that_is_not_an_export_is_refused(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text('{"id": "abc"}\n')
    code, _, err = _cli("--data", str(tmp_path), "--agent", "dst", "import", str(path))
    assert code == 2 and "not a Dreamkeeper export" in err


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    bad=st.one_of(
        st.text(max_size=40),
        st.just('{"entry": {"id": "abc", "content": "x"}}'),
        st.just('{"entry": {"id": "abcdef123456", "content": "", "createdAt": "2026-01-01"}}'),
        st.builds(
            lambda v: json.dumps(
                {
                    "entry": {
                        "id": "abcdef123456",
                        "content": "x",
                        "createdAt": "2026-01-01",
                        "importanceScore": v,
                    }
                }
            ),
            st.one_of(st.floats(min_value=1.01), st.floats(max_value=-0.01), st.just("high")),
        ),
    )
)
def test_a_bad_line_anywhere_refuses_the_whole_file(tmp_path_factory, bad):
    root = tmp_path_factory.mktemp("bad")
    source = _seeded(root / "a")
    lines = list(export_lines(source))
    lines.insert(3, bad if bad.strip() else '"not an entry"')
    with pytest.raises(InvalidInput):
        parsed = read_export(lines)
        apply_import(FileMemoryStore(root / "b", "dst"), parsed)
    assert FileMemoryStore(root / "b", "dst").entries() == []


def test_vectors_travel_with_vectors_into_a_store_of_the_same_model(tmp_path, embedding_client):
    from dreamkeeper.stores.vectors.backfill import embed_entries

    source = FileMemoryStore(tmp_path / "a", "src", embeddings=embedding_client)
    for content, category, importance in FACTS:
        source.create(content, category=category, importance=importance)
    assert len(embed_entries(source, embedding_client).embedded) == len(FACTS)
    lines = list(export_lines(source, with_vectors=True))
    assert json.loads(lines[0])["withVectors"] is True
    assert all("vector" in json.loads(line) for line in lines[1:])

    target = FileMemoryStore(tmp_path / "b", "dst", embeddings=embedding_client)
    plan = apply_import(target, read_export(lines))
    assert plan.vectors_written == len(FACTS) and plan.vectors_skipped == 0
    # Nothing left to embed: the imported vectors are current for this model.
    assert embed_entries(target, embedding_client).embedded == []
    for query in QUERIES[:-1]:
        expected = [h.entry.id for h in search(source, query, limit=5)]
        assert [h.entry.id for h in search(target, query, limit=5)] == expected

    keyword_only = FileMemoryStore(tmp_path / "c", "dst")
    plan = apply_import(keyword_only, read_export(lines))
    assert plan.vectors_written == 0 and plan.vectors_skipped == len(FACTS)


def test_validity_and_supersedes_survive_an_export_and_import(tmp_path):
    from dreamkeeper.stores.longterm.supersede import history, supersede

    source = FileMemoryStore(tmp_path / "a", "src")
    old = source.create("Maya Lund lives in Lisbon.", category="people")
    new = source.create("Maya Lund lives in Porto.", category="people")
    assert supersede(source, old.id, new.id).applied
    target = FileMemoryStore(tmp_path / "b", "dst")
    apply_import(target, read_export(list(export_lines(source))))
    moved = target.require(old.id)
    assert (moved.superseded_by, moved.invalid_at) == (new.id, source.require(old.id).invalid_at)
    assert [e.id for e in history(target, new.id)] == [old.id, new.id]
    assert [h.entry.id for h in search(target, "Maya Lund lives")] == [new.id]


def test_notes_without_ids_import_with_their_own_dates_through_the_cli(tmp_path):
    header = {"format": FORMAT, "version": FORMAT_VERSION, "agent": "notes"}
    notes = [
        {"content": "Started learning the cello.", "createdAt": "2019-03-02T18:00:00Z"},
        {
            "content": "The user moved to Lyon.",
            "createdAt": "2021-07-10",
            "validFrom": "2021-07-01",
            "category": "user/home",
        },
        {"content": "Undated: the user likes figs."},
    ]
    path = tmp_path / "notes.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in [header, *({"entry": n} for n in notes)]))
    args = ("--data", str(tmp_path / "d"), "--agent", "me", "import", str(path))
    code, out, err = _cli(*args)
    assert code == 0, err
    assert out.startswith("created 3, unchanged 0")
    store = FileMemoryStore(tmp_path / "d", "me")
    by_content = {e.content: e for e in store.entries()}
    cello = by_content["Started learning the cello."]
    assert cello.created_at.isoformat() == "2019-03-02T18:00:00+00:00"
    lyon = by_content["The user moved to Lyon."]
    assert (
        lyon.valid_from is not None and lyon.valid_from.isoformat() == "2021-07-01T00:00:00+00:00"
    )
    assert lyon.category == "user/home"
    assert search(store, "Lyon", as_of="2021-07-05")[0].entry.id == lyon.id
    # Again: the derived ids find them, nothing new.
    code, out, _ = _cli(*args)
    assert code == 0 and out.startswith("created 0, unchanged 3")
