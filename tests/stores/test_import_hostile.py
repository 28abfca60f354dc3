"""Import of hostile files: a line nested 100,000 deep, and id fields shaped like paths.
Each is refused with exit 2 (InvalidInput) and nothing is written — in the CLI, in
`read_export`, and in the store's own import path, which every backend shares."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dreamkeeper.cli.main import main
from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.core.models import MemoryEntry
from dreamkeeper.stores.files.memory_store import FileMemoryStore
from dreamkeeper.stores.longterm.transfer import export_lines, read_export

ENTRY_ID = re.compile(r"[0-9a-f]{12}")
GOOD = "abcdef123456"


def _import(data: Path, path: Path) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main(["--data", str(data), "--agent", "dst", "import", str(path)])
    return code, err.getvalue()


def _nothing_written(data: Path) -> bool:
    memory = data / "agents" / "dst" / "memory"
    return not memory.exists() or not list(memory.rglob("*.json"))


def _export_with(tmp_path: Path, extra_line: str) -> Path:
    source = FileMemoryStore(tmp_path / "src", "src")
    source.create("User lives in Chicago.", entry_id=GOOD)
    lines = list(export_lines(source))
    path = tmp_path / "hostile.jsonl"
    path.write_text("\n".join([*lines, extra_line]) + "\n")
    return path


def _entry_line(**fields: object) -> str:
    entry = {
        "id": "0123456789ab",
        "content": "Trish moved to Atlanta.",
        "createdAt": "2026-01-01T00:00:00Z",
        "lastSeenAt": "2026-01-01T00:00:00Z",
        **fields,
    }
    return json.dumps({"entry": entry})


def test_a_line_nested_100000_deep_exits_2_and_writes_nothing(tmp_path):
    depth = 100_000
    path = _export_with(tmp_path, "[" * depth + "]" * depth)
    code, err = _import(tmp_path / "dst", path)
    assert code == 2, err
    assert "nested" in err and "RecursionError" not in err
    assert _nothing_written(tmp_path / "dst")


def test_a_deep_value_inside_an_entry_is_refused_too(tmp_path):
    deep = "[" * 50_000 + "]" * 50_000
    line = '{"entry": {"id": "0123456789ab", "content": "x", "tags": ' + deep + "}}"
    with pytest.raises(InvalidInput, match="line 3"):
        read_export(_export_with(tmp_path, line).read_text().splitlines())


not_an_id = st.one_of(
    st.sampled_from(["../../etc/passwd", "..", "a/b", "", "ABCDEF123456", "abcdef12345"]),
    st.text(max_size=30).filter(lambda s: not ENTRY_ID.fullmatch(s)),
)


@pytest.mark.parametrize(
    "fields",
    [
        {"retiredInto": ["../../../outside"], "archivedAt": "2026-01-02T00:00:00Z"},
        {"retiredInto": [GOOD, "a/b"], "archivedAt": "2026-01-02T00:00:00Z"},
        {"metadata": {"mergedFrom": json.dumps([GOOD, "../x"])}},
        {"metadata": {"mergedFrom": "not json"}},
        {"metadata": {"mergedFrom": json.dumps({"id": GOOD})}},
    ],
    ids=["retiredInto-traversal", "retiredInto-mixed", "mergedFrom", "mergedFrom-text", "obj"],
)
def test_an_id_field_that_is_not_an_id_exits_2_and_writes_nothing(tmp_path, fields):
    code, err = _import(tmp_path / "dst", _export_with(tmp_path, _entry_line(**fields)))
    assert code == 2, err
    assert "line 3" in err
    assert _nothing_written(tmp_path / "dst")


@settings(max_examples=50, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(bad=not_an_id, where=st.sampled_from(["retiredInto", "mergedFrom"]))
def test_the_store_refuses_any_non_id_in_an_id_field(tmp_path_factory, bad, where):
    """The store's own import path (not only the file reader): a backend's
    `import_entries` gets the same check from `records.imported_entry`."""
    root = tmp_path_factory.mktemp("ids")
    at = "2026-01-01T00:00:00Z"
    data: dict[str, object] = {"id": "0123456789ab", "content": "x", "createdAt": at}
    if where == "retiredInto":
        data.update(retiredInto=[bad], archivedAt=at)
    else:
        data.update(metadata={"mergedFrom": json.dumps([bad])})
    entry = MemoryEntry.model_validate(data)
    store = FileMemoryStore(root, "dst")
    with pytest.raises(InvalidInput, match=where):
        store.import_entries([entry])
    assert store.entries(include_archived=True) == []


def test_valid_id_fields_still_import(tmp_path):
    line = _entry_line(
        retiredInto=[GOOD], archivedAt="2026-01-02T00:00:00Z", metadata={"mergedFrom": "[]"}
    )
    code, err = _import(tmp_path / "dst", _export_with(tmp_path, line))
    assert code == 0, err
    imported = FileMemoryStore(tmp_path / "dst", "dst").get("0123456789ab")
    assert imported is not None and imported.retired_into == [GOOD]
