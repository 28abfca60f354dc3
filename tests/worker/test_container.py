"""The Docker image and docker-compose.yml, checked without a Docker engine.

The image is built from exactly what the Dockerfile's COPY lines put into it, so the
build is replayed here: the COPY lines are read, a directory holding exactly what they
copy is laid out (minus .dockerignore), and a wheel is built from it as the image's
`pip install` would. A package folder that pyproject.toml maps but the Dockerfile does
not copy fails the build; one the wheel lacks fails the content check."""

from __future__ import annotations

import glob
import json
import os
import re
import shlex
import shutil
import tomllib
import zipfile
from pathlib import Path, PurePosixPath

import pytest

from dreamkeeper.cli.main import build_parser
from tests.helpers import build_wheel

ROOT = Path(__file__).resolve().parents[2]


# -- the Dockerfile ---------------------------------------------------------------------


def instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    result: list[tuple[str, str]] = []
    pending = ""
    for raw in dockerfile.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):  # a comment inside a continued instruction
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        pending += line
        keyword, _, rest = pending.strip().partition(" ")
        result.append((keyword.upper(), rest.strip()))
        pending = ""
    assert not pending, "the Dockerfile ends inside a continued line"
    return result


def exec_form(arguments: str) -> list[str]:
    """An instruction's arguments, JSON (exec) form or shell words."""
    if arguments.startswith("["):
        parsed = json.loads(arguments)
        assert isinstance(parsed, list) and all(isinstance(a, str) for a in parsed)
        return parsed
    return shlex.split(arguments)


class Ignore:
    """.dockerignore: patterns anchored at the context root, `*` within one path element,
    `**` across any; a match excludes everything below it; the last matching pattern
    wins and `!` re-includes."""

    def __init__(self, path: Path) -> None:
        self.rules: list[tuple[bool, re.Pattern[str]]] = []
        if path.exists():
            for line in path.read_text().splitlines():
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                keep = line.startswith("!")
                pattern = os.path.normpath(line.lstrip("!").strip()).lstrip("/")
                self.rules.append((keep, re.compile(self._regex(pattern))))

    @staticmethod
    def _regex(pattern: str) -> str:
        out, i = "", 0
        while i < len(pattern):
            if pattern.startswith("**/", i):
                out, i = out + "(?:.*/)?", i + 3
            elif pattern.startswith("**", i):
                out, i = out + ".*", i + 2
            elif pattern[i] == "*":
                out, i = out + "[^/]*", i + 1
            elif pattern[i] == "?":
                out, i = out + "[^/]", i + 1
            else:
                out, i = out + re.escape(pattern[i]), i + 1
        return out

    def excluded(self, relative: str) -> bool:
        parts = PurePosixPath(relative).parts
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        verdict = False
        for keep, regex in self.rules:
            if any(regex.fullmatch(prefix) for prefix in prefixes):
                verdict = not keep
        return verdict


def copy_into_image(source: Path, context: Path, target: Path, ignore: Ignore) -> None:
    """One COPY source as Docker copies it: a file to `target`, a directory's contents
    into `target`."""
    if source.is_dir():
        for dirpath, dirnames, filenames in os.walk(source):
            here = Path(dirpath)
            dirnames[:] = [
                d
                for d in dirnames
                if not ignore.excluded((here / d).relative_to(context).as_posix())
            ]
            for name in filenames:
                file = here / name
                if ignore.excluded(file.relative_to(context).as_posix()):
                    continue
                dest = target / file.relative_to(source)
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(file, dest)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)


def lay_out_image(dockerfile: Path, context: Path, image_root: Path) -> list[tuple[Path, str]]:
    """Replay WORKDIR, COPY and ADD (local sources) into `image_root`; return each `pip
    install` RUN's working directory with its command."""
    ignore = Ignore(context / ".dockerignore")
    workdir = PurePosixPath("/")
    installs: list[tuple[Path, str]] = []
    for keyword, arguments in instructions(dockerfile):
        if keyword == "WORKDIR":
            workdir = workdir / arguments
        elif keyword in ("COPY", "ADD"):
            words = exec_form(arguments)
            flags = [w for w in words if w.startswith("--")]
            if any(f.startswith("--from") for f in flags):
                continue  # from another stage or image, not the build context
            paths = [w for w in words if not w.startswith("--")]
            *sources, dest = paths
            dest_path = workdir / dest
            into_dir = dest.endswith("/") or dest in (".", "./") or len(sources) > 1
            for pattern in sources:
                matched = sorted(glob.glob(pattern, root_dir=context)) or [pattern]
                for name in matched:
                    source = context / name
                    assert source.exists(), f"{keyword} {name}: not in the build context"
                    relative = os.path.normpath(name)
                    assert not ignore.excluded(relative), f"{keyword} {name}: in .dockerignore"
                    target = image_root / str(dest_path).lstrip("/")
                    if into_dir and source.is_file():
                        target = target / source.name
                    copy_into_image(source, context, target, ignore)
        elif keyword == "RUN" and "pip install" in arguments:
            installs.append((image_root / str(workdir).lstrip("/"), arguments))
    return installs


def pip_install_targets(command: str) -> list[str]:
    """The local paths (with extras) the `pip install` in a RUN command installs."""
    (step,) = [part for part in command.split("&&") if "pip install" in part]
    words = shlex.split(step)
    after = words[words.index("install") + 1 :]
    return [w for w in after if not w.startswith("-")]


# -- pyproject.toml -----------------------------------------------------------------------


def setuptools_layout() -> tuple[list[str], dict[str, str], dict[str, list[str]]]:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    config = pyproject["tool"]["setuptools"]
    return config["packages"], config["package-dir"], config.get("package-data", {})


def expected_wheel_files() -> set[str]:
    """Every module and data file the wheel must hold: each declared package's
    __init__.py, its package data, and every .py below every mapped folder (a sub-package
    folder left out of pyproject.toml's list is missed by the wheel, so it shows here)."""
    packages, package_dir, package_data = setuptools_layout()
    expected = {f"{name.replace('.', '/')}/__init__.py" for name in packages}
    for name, files in package_data.items():
        expected |= {f"{name.replace('.', '/')}/{file}" for file in files}
    # The longest mapped folder owns a file (a sub-package mapped to its own folder).
    folders = sorted(package_dir.items(), key=lambda item: -len(item[1]))
    sources = {
        path.relative_to(ROOT).as_posix()
        for folder in package_dir.values()
        for path in (ROOT / folder).rglob("*.py")
        if "__pycache__" not in path.parts
    }
    for relative in sources:
        owner, folder = next((n, f) for n, f in folders if relative.startswith(f + "/"))
        expected.add(f"{owner.replace('.', '/')}/{relative[len(folder) + 1 :]}")
    return expected


def test_expected_files_cover_every_package_folder():
    """The check below is only as good as this list: it names the subpackages too."""
    expected = expected_wheel_files()
    for wanted in (
        "dreamkeeper/__init__.py",
        "dreamkeeper/py.typed",
        "dreamkeeper/testing/scripted_llm.py",
        "dreamkeeper/core/settings.py",
        "dreamkeeper/client/codec.py",
        "dreamkeeper/worker/runtime.py",
        "dreamkeeper/service/app.py",
        "dreamkeeper/cli/main.py",
        "dreamkeeper/agent/__init__.py",
    ):
        assert wanted in expected


def test_the_image_builds_a_wheel_with_every_package(tmp_path):
    image_root = tmp_path / "image"
    installs = lay_out_image(ROOT / "Dockerfile", ROOT, image_root)
    assert installs, "the Dockerfile installs nothing with pip"
    extras_known = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["project"].get(
            "optional-dependencies", {}
        )
    )
    for workdir, command in installs:
        targets = pip_install_targets(command)
        assert targets, f"cannot tell what {command!r} installs"
        for target in targets:
            path, _, extras = target.partition("[")
            unknown = {e.strip() for e in extras.rstrip("]").split(",") if e.strip()}
            assert unknown <= extras_known, f"{target}: no such extra in pyproject.toml"
            project = (workdir / path).resolve()
            wheel = build_wheel(project, tmp_path / "wheels")
            names = set(zipfile.ZipFile(wheel).namelist())
            missing = sorted(expected_wheel_files() - names)
            assert missing == [], f"the image's wheel lacks {missing}"
            (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
            text = zipfile.ZipFile(wheel).read(entry_points).decode()
            assert "dreamkeeper = dreamkeeper.cli.main:entry" in text


def test_the_image_command_is_a_dreamkeeper_command():
    steps = dict(instructions(ROOT / "Dockerfile"))
    assert exec_form(steps["ENTRYPOINT"]) == ["dreamkeeper"]
    build_parser().parse_args(exec_form(steps["CMD"]))


# -- docker-compose.yml -------------------------------------------------------------------


def compose() -> dict:
    yaml = pytest.importorskip("yaml", reason="PyYAML comes with the local-embeddings extra")
    parsed = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert isinstance(parsed, dict) and isinstance(parsed.get("services"), dict)
    return parsed


def dreamkeeper_services(parsed: dict) -> dict[str, list[str]]:
    """Each service built from the Dockerfile, with the dreamkeeper arguments it runs."""
    steps = dict(instructions(ROOT / "Dockerfile"))
    found = {}
    for name, service in parsed["services"].items():
        if service.get("build") != ".":
            continue
        command = service.get("command", exec_form(steps["CMD"]))
        found[name] = exec_form(command) if isinstance(command, str) else command
    return found


def test_every_compose_service_runs_a_real_dreamkeeper_command():
    services = dreamkeeper_services(compose())
    assert services
    parser = build_parser()
    for name, command in services.items():
        try:
            parser.parse_args(command)
        except Exception as exc:  # UsageError: not a subcommand, or a bad option
            pytest.fail(f"service {name}: `dreamkeeper {' '.join(command)}` does not parse: {exc}")


def _environment(service: dict) -> dict[str, str]:
    env = service.get("environment", {})
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: "" if v is None else str(v) for k, v in env.items()}


def test_compose_serves_the_memory_api_on_the_database():
    parsed = compose()
    services = dreamkeeper_services(parsed)
    serving = [name for name, command in services.items() if command[:1] == ["serve"]]
    assert len(serving) == 1, f"one serve service, not {serving}"
    (name,) = serving
    service = parsed["services"][name]
    args = build_parser().parse_args(services[name])
    # Inside the container 127.0.0.1 is unreachable from the published port.
    assert args.host == "0.0.0.0"
    port = args.port or 8780
    assert any(str(p).endswith(f":{port}:{port}") for p in service.get("ports", []))
    env = _environment(service)
    assert env["DREAMKEEPER_DATABASE_URL"].endswith("@postgresql:5432/dreamkeeper")
    for setting in ("DREAMKEEPER_PAYLOAD_KEY", "DREAMKEEPER_SERVE_TOKEN", "TEMPORAL_ADDRESS"):
        assert setting in env, f"{name} lacks {setting}"
    assert "/v1/health" in " ".join(service["healthcheck"]["test"])


def _workers(parsed: dict) -> dict[str, list[str]]:
    return {
        name: command
        for name, command in dreamkeeper_services(parsed).items()
        if command[:1] in (["serve"], ["worker"])
    }


def test_workers_on_the_database_share_it_start_after_its_schema_and_keep_no_volume():
    """serve and at least two worker replicas on one database and one task queue; each
    waits for the one-shot `db upgrade` (a worker refuses a schema not its own)."""
    parsed = compose()
    on_database = {
        name: parsed["services"][name]
        for name in _workers(parsed)
        if "DREAMKEEPER_DATABASE_URL" in _environment(parsed["services"][name])
    }
    urls = {_environment(service)["DREAMKEEPER_DATABASE_URL"] for service in on_database.values()}
    assert len(urls) == 1
    replicas = sum(s.get("deploy", {}).get("replicas", 1) for s in on_database.values())
    assert replicas >= 3 and "dreamkeeper-serve" in on_database
    upgrades = [
        name
        for name, command in dreamkeeper_services(parsed).items()
        if command == ["db", "upgrade"]
    ]
    assert len(upgrades) == 1
    (upgrade,) = upgrades
    assert _environment(parsed["services"][upgrade])["DREAMKEEPER_DATABASE_URL"] in urls
    for name, service in on_database.items():
        assert service["depends_on"][upgrade]["condition"] == "service_completed_successfully"
        assert not [v for v in service.get("volumes", []) if ":/data" in str(v)], name
        env = _environment(service)
        assert "DREAMKEEPER_SHARD_MAP" not in env and "DREAMKEEPER_TASK_QUEUE" not in env


def test_each_data_volume_has_one_file_store_worker():
    """A worker on files owns its data directory: one process per volume, and every
    such worker has one (docs/service.md)."""
    parsed = compose()
    owners: dict[str, list[str]] = {}
    for name in _workers(parsed):
        service = parsed["services"][name]
        if "DREAMKEEPER_DATABASE_URL" in _environment(service):
            continue
        data = [str(v).split(":")[0] for v in service.get("volumes", []) if ":/data" in str(v)]
        assert len(data) == 1, f"{name} runs a worker without a /data volume"
        owners.setdefault(data[0], []).append(name)
    assert owners
    shared = {volume: names for volume, names in owners.items() if len(names) > 1}
    assert shared == {}


def test_the_codec_server_opens_with_the_workers_database_keys():
    """Each agent's payloads are sealed with its data key, kept in the workers' database:
    a codec server without that database (and with no volume of theirs) opens none."""
    parsed = compose()
    workers = _workers(parsed)
    urls = {
        url
        for n in workers
        if (url := _environment(parsed["services"][n]).get("DREAMKEEPER_DATABASE_URL"))
    }
    assert urls
    codecs = [n for n, c in dreamkeeper_services(parsed).items() if c[:1] == ["codec-server"]]
    assert codecs
    for name in codecs:
        env = _environment(parsed["services"][name])
        assert env.get("DREAMKEEPER_DATABASE_URL") in urls, name
        assert "DREAMKEEPER_PAYLOAD_KEY" in env


def test_every_container_on_the_database_shares_one_keyring_volume():
    """The agents' data keys in the database are wrapped by the keyring's key-encryption
    keys (docs/storage.md): serve, the workers, the codec server and the migration must
    all mount one keyring at the path DREAMKEEPER_KEYRING names, or a forget's rotation on
    one leaves the others unable to open any key (and a keyring per container would be
    refused). The image owns that path, so a new named volume is writable by its user."""
    parsed = compose()
    services = parsed["services"]
    on_database = [
        name
        for name in dreamkeeper_services(parsed)
        if "DREAMKEEPER_DATABASE_URL" in _environment(services[name])
        or "migrate" in dreamkeeper_services(parsed)[name]
    ]
    assert {"dreamkeeper-serve", "dreamkeeper-worker", "dreamkeeper-codec"} <= set(on_database)
    mounted = set()
    for name in on_database:
        env = _environment(services[name])
        if dreamkeeper_services(parsed)[name] == ["db", "upgrade"]:
            continue  # the schema job seals nothing
        path = env.get("DREAMKEEPER_KEYRING")
        assert path, f"{name} has no DREAMKEEPER_KEYRING"
        volumes = [str(v) for v in services[name].get("volumes", []) if str(v).endswith(f":{path}")]
        assert len(volumes) == 1, f"{name} does not mount a keyring at {path}"
        mounted.add(volumes[0].split(":")[0])
        assert "DREAMKEEPER_PAYLOAD_KEY" in env, name
    assert len(mounted) == 1 and mounted <= set(parsed["volumes"])
    run = " ".join(v for k, v in instructions(ROOT / "Dockerfile") if k == "RUN")
    assert "/keyring" in run and "chown dreamkeeper" in run


def test_every_localhost_origin_in_compose_is_a_port_compose_publishes():
    """A browser-facing setting (a CORS origin, the codec endpoint the UI calls) naming a
    port no service publishes is dead configuration that suggests a port is in use."""
    parsed = compose()
    published = {
        str(port).rsplit(":", 2)[-2]
        for service in parsed["services"].values()
        for port in service.get("ports", [])
    }
    named = {
        (name, key, port)
        for name, service in parsed["services"].items()
        for key, value in _environment(service).items()
        for port in re.findall(r"//localhost:(\d+)", value)
    }
    assert named, "compose names no localhost origin at all"
    assert [n for n in named if n[2] not in published] == []
