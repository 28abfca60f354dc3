"""The parser's shape: each command group registers its own commands beside their
handlers, and `dream`'s actions are commands of their own under `dream`."""

from __future__ import annotations

import argparse

import pytest

from dreamkeeper.cli.main import COMMAND_GROUPS, UsageError, build_parser, main


def _commands(parser: argparse.ArgumentParser, prefix: str = "") -> dict[str, object]:
    """Every command's parser by its full name ("dream undo"), with its handler."""
    found: dict[str, object] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                full = f"{prefix} {name}".strip()
                found[full] = child.get_default("handler")
                found.update(_commands(child, full))
    return found


def test_each_command_group_registers_its_commands_beside_their_handlers():
    every: dict[str, object] = {}
    for group in COMMAND_GROUPS:
        parser = argparse.ArgumentParser()
        group.register(parser.add_subparsers())
        commands = _commands(parser)
        assert commands, group.__name__
        for name, handler in commands.items():
            assert getattr(handler, "__module__", None) == group.__name__, name
        assert not set(commands) & set(every), "two groups register one command"
        every.update(commands)
    assert every.keys() == _commands(build_parser()).keys()


@pytest.mark.parametrize(
    ("argv", "handler", "expected"),
    [
        (["dream"], "dream", {"dream_action": None, "dry_run": False}),
        (["dream", "--dry-run", "--json"], "dream", {"dry_run": True, "json": True}),
        (["dream", "undo", "abc123"], "undo", {"dream_action": "undo", "run_id": "abc123"}),
        (["dream", "--json", "undo", "r1", "--agent", "a"], "undo", {"json": True, "agent": "a"}),
        (["dream", "pending", "--run", "w1"], "approval", {"dream_action": "pending"}),
        (["dream", "approve", "merge:a", "prune:b"], "approval", {"keys": ["merge:a", "prune:b"]}),
        (["--agent", "a", "dream", "reject"], "approval", {"keys": [], "agent": "a"}),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else None,
)
def test_dream_actions_are_subcommands_of_dream(argv, handler, expected):
    args = build_parser().parse_args(argv)
    assert args.command == "dream" and args.handler.__name__ == handler
    assert {key: getattr(args, key) for key in expected} == expected


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["dream", "redo"], "invalid choice: 'redo'"),
        (["dream", "undo"], "the following arguments are required: RUN_ID"),
        (["dream", "undo", "r1", "r2"], "unrecognized arguments: r2"),
        (["dream", "pending", "merge:a"], "unrecognized arguments: merge:a"),
        # --run belongs to pending/approve/reject, after the action.
        (["dream", "--run", "w1"], "invalid choice: 'w1'"),
    ],
)
def test_a_malformed_dream_action_is_a_usage_error(argv, message):
    with pytest.raises(UsageError, match=message):
        build_parser().parse_args(argv)


def test_an_option_of_a_cycle_is_refused_with_an_action(tmp_path, capsys):
    base = ["--data", str(tmp_path), "--agent", "a1"]
    assert main([*base, "save", "a fact", "--direct"]) == 0
    capsys.readouterr()
    assert main([*base, "dream", "--dry-run", "undo", "r1"]) == 2
    assert "--dry-run goes with `dream` alone, not `dream undo`" in capsys.readouterr().err
