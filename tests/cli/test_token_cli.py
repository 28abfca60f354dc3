"""`dreamkeeper token`: what it asks for, and what it says about a damaged token store."""

from __future__ import annotations

import json


def test_create_without_a_scope_names_the_option_it_needs(run, tmp_path):
    """`--agent` is the global agent option: it does not scope a token, and the refusal
    says which option does."""
    code, _, err = run("--data", str(tmp_path), "--agent", "a1", "token", "create", "ci")
    assert code == 2
    assert "--scope" in err and "(--agent)" not in err
    assert "does not choose a token's agents" in err
    assert not (tmp_path / "access" / "tokens.json").exists()
    code, out, _ = run("--data", str(tmp_path), "token", "create", "ci", "--scope", "a1")
    assert code == 0 and out.startswith("dkt_")


def test_list_reports_a_damaged_store_and_create_leaves_it_alone(run, tmp_path):
    assert run("--data", str(tmp_path), "token", "create", "ci", "--scope", "a1")[0] == 0
    path = tmp_path / "access" / "tokens.json"
    raw = json.loads(path.read_text())
    raw["tokens"][0]["access"] = "Write"
    path.write_text(json.dumps(raw))
    damaged = path.read_bytes()
    code, _, err = run("--data", str(tmp_path), "token", "list")
    assert code == 2 and "damaged" in err and str(path) in err
    code, _, err = run("--data", str(tmp_path), "token", "create", "ci2", "--scope", "a1")
    assert code != 0 and "Nothing was changed" in err
    assert path.read_bytes() == damaged
