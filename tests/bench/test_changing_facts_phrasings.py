"""bench/changing_facts.py takes `--phrasings PATH`: a Python file's PHRASINGS, shaped
like PHRASINGS_B, words the changes; a file of another shape is refused before anything
is saved, naming what is wrong."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "changing_facts.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_changing_facts", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while defined
    spec.loader.exec_module(module)
    return module


bench = _bench()
SMALL = {"subjects": 14, "durable": 4, "distractors": 6, "seed": 3}


def _file(tmp_path: Path, phrasings: object) -> str:
    path = tmp_path / "mine.py"
    path.write_text(f"PHRASINGS = {phrasings!r}\n")
    return str(path)


def _saves(phrasings: str) -> list[tuple[str, str]]:
    _, saves = bench.generate(phrasings=phrasings, **SMALL)
    return [(s.text, s.category) for s in saves]


def test_a_file_holding_set_b_generates_what_set_b_does(tmp_path: Path):
    assert _saves(_file(tmp_path, bench.PHRASINGS_B)) == _saves("b")


def test_a_files_own_wording_is_what_the_changes_say(tmp_path: Path):
    own = {
        key: (("Update on me: {v} (zq).",) if key[0] == "user" else ("{n} update: {v} (zq).",))
        for key in bench.PHRASINGS_B
    }
    people, _ = bench.generate(phrasings=_file(tmp_path, own), **SMALL)
    changing = [p for p in people if not p.durable]
    assert changing
    for subject in changing:
        for text, value in zip(subject.texts, subject.values, strict=True):
            assert text.endswith(f"{value} (zq).")
            assert subject.name == "the user" or text.startswith(subject.name)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (lambda p: p.pop(("person", "car")), "lacks [('person', 'car')]"),
        (lambda p: p.update({("person", "car"): ("{n} drives.",)}), "lacks {v}"),
        (lambda p: p.update({("person", "car"): ("{v} is the car.",)}), "lacks {n}"),
        (lambda p: p.update({("person", "car"): ("{n}: {v} {x}",)}), "not a template"),
        (lambda p: p.update({("person", "car"): ()}), "not a non-empty tuple"),
        (lambda p: p.update({("pet", "name"): ("{n}: {v}",)}), "not a key of PHRASINGS_B"),
    ],
)
def test_a_file_of_another_shape_is_refused_naming_what_is_wrong(tmp_path: Path, change, named):
    phrasings = dict(bench.PHRASINGS_B)
    change(phrasings)
    with pytest.raises(ValueError) as refused:
        bench.phrasing_set(_file(tmp_path, phrasings))
    assert named in str(refused.value)


def test_the_command_line_refuses_a_bad_path_before_saving_anything(tmp_path, monkeypatch, capsys):
    (tmp_path / "none.py").write_text("OTHER = 1\n")
    monkeypatch.setattr(
        sys, "argv", ["changing_facts.py", "--phrasings", str(tmp_path / "none.py")]
    )
    with pytest.raises(SystemExit) as exited:
        bench.main()
    assert exited.value.code == 2
    assert "defines no dict PHRASINGS" in capsys.readouterr().err
    with pytest.raises(ValueError, match="neither a, b, c, e nor a Python file"):
        bench.phrasing_set(str(tmp_path / "missing.py"))
