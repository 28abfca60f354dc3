"""The fleet: thousands of agents on one PostgreSQL database, behind `dreamkeeper serve`
and two `dreamkeeper worker` processes, under the load agents make, over HTTP.

    .venv/bin/python bench/fleet.py --backend postgres [--agents 100,1000,10000]
        [--memories 200] [--concurrency 64] [--seconds 120] [--warmup 15]
        [--sequential-seconds 15] [--no-seal] [--rebuild] [--load-procs 2] [--profile]
        [--open-agents 256] [--serve-worker]

Data. One durable PostgreSQL cluster kept under `--data-dir` (bench/.data/fleet; fsync
on), with one database per fleet size: `--agents` agents of `--memories` memories each,
plus `--probes` agents the load never touches (for the cold-open and forget probes).
Content is sealed at rest (a payload key the bench generates once, beside the data, and
the keyring under the processes' data directory), unless `--no-seal` (databases of their
own, suffixed `_plain`). The stores are written through the product's bulk path
(`open_backend(settings).memory(agent).create_many(...)`, in `--load-procs` processes);
a later run loads only what is missing (an interrupted build resumes), and `--rebuild`
deletes the cluster and the keys and starts again. Texts are synthetic but shaped like
agent memories: a fact with names, places, dates and numbers, and 6-40 words of a Zipf
vocabulary (bench/search.py's); every text derives from (agent, index), so questions are
asked about an agent's own memories without keeping them.

Per fleet size, in order: a fresh Temporal dev server's task queue, 2 `dreamkeeper worker`
processes and `dreamkeeper serve --no-worker` (real processes, each with its own
PostgreSQL application name; `--serve-worker`: serve runs a worker too, as before), then:
  1. the load: `--concurrency` agents at once, each sending its next request as soon as
     the previous one answered (a closed loop), for `--warmup` s unrecorded and then
     `--seconds` s recorded. A request is 45% `POST /v1/agents/{a}/context`, 45%
     `POST .../search` (a question made of words of one of the agent's memories) and
     10% `POST .../memories`; agents drawn Zipf-like (s = `--zipf`) over a shuffled
     order, so a hot tenth takes most requests and a long cold tail misses serve's store
     cache (`--open-agents`, 256 by default as serve's own);
  2. the same requests one at a time for `--sequential-seconds` s: the time a request
     takes with nothing queued ahead of it;
  3. the same mix arriving as a Poisson process at `--paced-share` (0.5) of the requests/s
     the closed loop carried (or `--paced-rate` requests/s), at most `--concurrency` in
     flight, for `--paced-seconds` s after 5 s unrecorded, each timed from when it was
     due: the latency of a load the host can carry, where a closed loop's latency is
     only its concurrency over its throughput (Little's law);
  4. cold opens: a search on probe agents serve has never opened, one at a time, then
     the same search again;
  5. whole-agent forget of cold probe agents over HTTP (`POST .../forget`) and once with
     `dreamkeeper --agent X forget --whole-agent` (a new process); the probes are
     loaded again afterwards, so the database stays as built;
  6. one `GET /metrics` while the fleet has at most `--scrape-up-to` agents.
During 1-3 a thread samples pg_stat_activity and pg_locks every 0.25 s.

Printed per size: search, context and save p50/p95/p99 over HTTP, recalls/s and saves/s,
the share of requests to the hot tenth and to agents outside serve's cache, first
searches of agents during the load, the probes, serve's and each worker's peak RSS (VmHWM
from /proc), CPU seconds of every process during the load, the database's size, the most
connections (per process, and busy ones) and locks seen, errors by status, and the
server log's "out of shared memory" / "too many connections" lines. Then one table with
the targets beside each figure. Exit 1 when a request failed or a check of the data
failed; a missed speed target never changes the exit code.

With `--profile`, py-spy (not a dependency: `pip install py-spy` into the venv) samples
serve during the largest size's load, and the functions it spent most time in are
printed.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import itertools
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import psycopg
from postgres_backend import kept_cluster
from search import CATEGORIES, _vocabulary, _zipf_weights

from dreamkeeper.core.settings import StoreSettings
from dreamkeeper.stores.backends import open_backend
from dreamkeeper.stores.contract.records import NewEntry
from dreamkeeper.stores.postgres.database import POOL_MAX, Database
from dreamkeeper.stores.postgres.migrations import upgrade

BIN = Path(sys.executable).parent
DATA = Path(__file__).resolve().parent / ".data" / "fleet"
SEED = 20261204
SERVE_OPEN_AGENTS = 256  # DREAMKEEPER_SERVE_MAX_OPEN_AGENTS' default: serve's store cache
NEVER = "0 3 1 1 *"  # the dream schedule: once a year, so no sweep runs during the bench
APP = "fleet"  # PostgreSQL application names: fleet-serve, fleet-worker-0, ...
MIX = (("context", 0.45), ("search", 0.45), ("save", 0.10))
RECALLS = ("context", "search")
RECALLED = {"context": "recalled", "search": "hits"}  # the answer's list of memories found
LOG_ALARMS = ("out of shared memory", "too many connections", "remaining connection slots")

PEOPLE = (
    "Alice Moreau", "Bob Okafor", "Carmen Diaz", "Dmitri Volkov", "Elena Rossi",
    "Farid Haddad", "Grace Liu", "Hiro Tanaka", "Ingrid Berg", "Jamal Carter",
    "Keiko Sato", "Luis Ortega", "Maya Patel", "Nikhil Rao", "Olga Ivanova",
    "Priya Nair", "Quentin Blake", "Rosa Mendes", "Sven Larsen", "Tariq Aziz",
)  # fmt: skip
PLACES = (
    "Chicago", "Lisbon", "Nairobi", "Osaka", "Toronto", "Berlin", "Austin", "Denver",
    "Porto", "Seoul", "Dublin", "Lyon", "Oslo", "Pune", "Quito", "Zagreb",
)  # fmt: skip
PROJECTS = (
    "Orion", "Atlas", "Nimbus", "Juniper", "Falcon", "Harbor", "Cobalt", "Meridian",
    "Sable", "Quartz", "Tundra", "Beacon",
)  # fmt: skip
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday")
TEMPLATES = (
    "{person} prefers {words} and asked to be called before {hour}:00.",
    "The {project} release is due on {date}; {person} owns the {words} part.",
    "User's colleague {person} lives in {place} and mentioned {words}.",
    "Meeting with {person} about {project} moved to {day} at {hour}:30. Notes: {words}.",
    "Budget for {project} is {amount} USD, approved by {person}: {words}.",
    "Flight to {place} on {date}, booking {code}; {words}.",
    "{person} dislikes {words}; avoid scheduling anything on {day}.",
    "The {project} server runs in {place} (ticket {code}): {words}.",
    "User said: {words}. Follow up with {person} in {place} by {date}.",
)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


# -- texts ------------------------------------------------------------------------------


class Texts:
    """Every memory of the fleet, from (agent, index) alone: the bench never keeps them."""

    def __init__(self) -> None:
        self.vocab = _vocabulary(random.Random(SEED))
        self.cum = list(itertools.accumulate(_zipf_weights(len(self.vocab))))

    def memory(self, agent: str, index: int) -> tuple[NewEntry, list[str]]:
        """The memory and the words a question about it may use (names first)."""
        rng = random.Random(f"{agent}/{index}")
        words = rng.choices(self.vocab, cum_weights=self.cum, k=rng.randint(6, 40))
        person, project = rng.choice(PEOPLE), rng.choice(PROJECTS)
        text = rng.choice(TEMPLATES).format(
            person=person,
            project=project,
            place=rng.choice(PLACES),
            date=f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
            day=rng.choice(DAYS),
            hour=rng.randint(7, 19),
            amount=f"{rng.randint(2, 90) * 1000:,}",
            code=f"{rng.choice('ABCDEFGH')}{rng.randint(1000, 99999)}",
            words=" ".join(words),
        )
        entry = NewEntry(
            text,
            category=rng.choice(CATEGORIES),
            tags=tuple(rng.sample(self.vocab[:200], k=rng.randint(0, 2))),
            importance=round(rng.uniform(0.1, 0.95), 2),
        )
        return entry, [person.split()[0], project, *words]

    def question(self, agent: str, memories: int, rng: random.Random) -> str:
        """One to three words of one of the agent's memories, half the time with its
        person's or project's name."""
        _, terms = self.memory(agent, rng.randrange(memories))
        words = terms[2:]
        picked = rng.sample(words, k=min(len(words), rng.randint(1, 3)))
        if rng.random() < 0.5:
            picked.insert(0, rng.choice(terms[:2]))
        return " ".join(picked)


# -- the data -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Fleet:
    agents: int
    memories: int
    probes: int
    sealed: bool

    @property
    def database(self) -> str:
        return f"fleet_{self.agents}x{self.memories}" + ("" if self.sealed else "_plain")

    def agent_ids(self) -> list[str]:
        return [f"agent-{n:05d}" for n in range(self.agents)]

    def probe_ids(self) -> list[str]:
        return [f"probe-{n:03d}" for n in range(self.probes)]


class Layout:
    """Where a run keeps what it builds: the cluster, the processes' data directories
    (their keyring), the payload key, the logs."""

    def __init__(self, root: Path, sealed: bool) -> None:
        self.root = root
        self.cluster = root / "pg"
        self.data = root / ("sealed" if sealed else "plain")
        self.key_file = root / "payload-key.txt"  # outside the data directory: passed by env
        self.logs = root / "logs"
        self.sealed = sealed

    def prepare(self, rebuild: bool) -> None:
        if rebuild and self.root.exists():
            shutil.rmtree(self.root)
        for d in (self.root, self.data, self.logs):
            d.mkdir(parents=True, exist_ok=True)
        if self.sealed and not self.key_file.exists():
            self.key_file.write_text(base64.b64encode(os.urandom(32)).decode() + "\n")
            self.key_file.chmod(0o600)

    def env(self, url: str) -> dict[str, str]:
        """The environment of every Dreamkeeper process of the run (the bench's too)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DREAMKEEPER_", "PG"))}
        env.update(
            DREAMKEEPER_DATA=str(self.data),
            DREAMKEEPER_DATABASE_URL=url,
            DREAMKEEPER_EMBEDDING_BACKEND="none",
            DREAMKEEPER_DREAM_CRON=NEVER,
            PGAPPNAME=f"{APP}-bench",
        )
        if self.sealed:
            env["DREAMKEEPER_PAYLOAD_KEY"] = self.key_file.read_text().strip()
        return env


_loader: tuple[Any, int, Texts] | None = None


def _loader_start(url: str, data: str, memories: int) -> None:
    global _loader
    backend = open_backend(StoreSettings(data_dir=Path(data), database_url=url))
    _loader = (backend, memories, Texts())


def _load_agents(agents: list[str]) -> int:
    """Each agent's memories in one `create_many` (one transaction: an agent is loaded
    whole or not at all, so an interrupted build resumes by agent)."""
    assert _loader is not None
    backend, memories, texts = _loader
    for agent in agents:
        backend.memory(agent).create_many(texts.memory(agent, i)[0] for i in range(memories))
    return len(agents)


def present_agents(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        return {row[0] for row in conn.execute("SELECT agent_id FROM dk_memory_agent")}


def ensure_database(cluster: Any, fleet: Fleet) -> str:
    with psycopg.connect(cluster.url(), autocommit=True) as conn:
        found = conn.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", (fleet.database,)
        ).fetchone()
    url = cluster.create_database(fleet.database) if found is None else cluster.url(fleet.database)
    db = Database(url, max_size=2)
    try:
        upgrade(db)
    finally:
        db.close()
    return url


def load(url: str, layout: Layout, fleet: Fleet, agents: list[str], procs: int) -> float:
    """Write `agents` through the bulk path in `procs` processes; seconds taken."""
    if not agents:
        return 0.0
    chunks = [agents[i : i + 20] for i in range(0, len(agents), 20)]
    started = time.perf_counter()
    done = 0
    with ProcessPoolExecutor(
        max_workers=procs,
        mp_context=get_context("spawn"),
        initializer=_loader_start,
        initargs=(url, str(layout.data), fleet.memories),
    ) as pool:
        for n in pool.map(_load_agents, chunks):
            done += n
            if done % 1000 < n or done == len(agents):
                took = time.perf_counter() - started
                print(
                    f"  {fleet.database}: {done:,} of {len(agents):,} agents written "
                    f"({took:.0f} s, {done * fleet.memories / took:,.0f} memories/s)",
                    flush=True,
                )
    return time.perf_counter() - started


def build(cluster: Any, layout: Layout, fleet: Fleet, procs: int) -> tuple[str, float, int]:
    """The fleet's database, with every agent loaded: (url, seconds spent, agents loaded)."""
    url = ensure_database(cluster, fleet)
    present = present_agents(url)
    missing = [a for a in [*fleet.agent_ids(), *fleet.probe_ids()] if a not in present]
    return url, load(url, layout, fleet, missing, procs), len(missing)


# -- the processes --------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak) in kB."""
    found = {}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            name, _, value = line.partition(":")
            if name in ("VmRSS", "VmHWM"):
                found[name] = int(value.split()[0])
    return found


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


class TemporalServer:
    """`temporal server start-dev`, headless, in memory: one per run."""

    def __init__(self, logs: Path) -> None:
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        log = open(logs / "temporal.log", "wb")  # noqa: SIM115 - lives with the process
        self.proc = subprocess.Popen(
            [str(BIN / "temporal"), "server", "start-dev", "--headless", "--ip", "127.0.0.1"]
            + ["--port", str(self.port), "--log-level", "error"],
            stdout=log,
            stderr=log,
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit((logs / "temporal.log").read_text()[-3000:])
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port)):
                return
            time.sleep(0.2)
        raise SystemExit("the Temporal dev server did not start")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Services:
    """Two `dreamkeeper worker` processes and `dreamkeeper serve` on one fleet."""

    def __init__(
        self,
        env: dict[str, str],
        address: str,
        queue: str,
        logs: Path,
        *,
        serve_worker: bool = False,
        open_agents: int = SERVE_OPEN_AGENTS,
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.logs = logs
        # The CLI's forget runs as a workflow on these workers: it needs the same address
        # and queue, so the environment is kept for it.
        self.env = base = {
            **env,
            "TEMPORAL_ADDRESS": address,
            "DREAMKEEPER_TASK_QUEUE": queue,
            "DREAMKEEPER_SERVE_MAX_OPEN_AGENTS": str(open_agents),
        }
        # A fleet's layout: serve answers requests, the workers run the workflows (with
        # a worker of its own, serve's workflow tasks starve under the read load).
        serve = ["serve", "--port", str(self.port), *([] if serve_worker else ["--no-worker"])]
        self.procs: dict[str, subprocess.Popen] = {}
        self.log_files: dict[str, Path] = {}
        for name, command in (
            ("worker-0", ["worker"]),
            ("worker-1", ["worker"]),
            ("serve", serve),
        ):
            path = logs / f"{name}.log"
            out = open(path, "wb")  # noqa: SIM115 - lives with the process
            self.log_files[name] = path
            self.procs[name] = subprocess.Popen(
                [str(BIN / "dreamkeeper"), *command],
                env={**base, "PGAPPNAME": f"{APP}-{name}"},
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def wait_ready(self, timeout: float = 300) -> float:
        started = time.monotonic()
        deadline = started + timeout
        waiting = set(self.procs)
        with httpx.Client(timeout=2) as http:  # one client: each new one builds an SSL context
            while waiting and time.monotonic() < deadline:
                self._poll(http, waiting)
                time.sleep(0.3)
        if waiting:
            raise SystemExit(f"not ready after {timeout:.0f} s: {sorted(waiting)}")
        return time.monotonic() - started

    def _poll(self, http: httpx.Client, waiting: set[str]) -> None:
        for name in sorted(waiting):
            proc = self.procs[name]
            if proc.poll() is not None:
                tail = self.log_files[name].read_text(errors="replace")[-3000:]
                raise SystemExit(f"{name} exited with {proc.returncode}:\n{tail}")
            if name == "serve":
                with contextlib.suppress(httpx.HTTPError):
                    if http.get(f"{self.url}/v1/health").status_code == 200:
                        waiting.discard(name)
            elif "worker on " in self.log_files[name].read_text(errors="replace"):
                waiting.discard(name)

    def pids(self) -> dict[str, int]:
        return {name: proc.pid for name, proc in self.procs.items()}

    def rss_mb(self) -> dict[str, tuple[float, float]]:
        """(now, peak) per process."""
        out = {}
        for name, pid in self.pids().items():
            status = proc_status(pid)
            out[name] = (status.get("VmRSS", 0) / 1024, status.get("VmHWM", 0) / 1024)
        return out

    def log_lines(self, needles: Iterable[str]) -> dict[str, int]:
        counts: Counter[str] = Counter()
        for path in self.log_files.values():
            for line in path.read_text(errors="replace").splitlines():
                for needle in needles:
                    if needle in line:
                        counts[needle] += 1
        return dict(counts)

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


# -- watching the database ------------------------------------------------------------------


@dataclass
class DatabaseWatch:
    """The most connections (per application name, and busy ones: running a statement or
    inside a transaction) and the most locks seen, sampled every `interval` s."""

    url: str
    database: str
    interval: float = 0.25
    connections: Counter[str] = field(default_factory=Counter)
    busy: Counter[str] = field(default_factory=Counter)
    total: int = 0
    locks: int = 0
    samples: int = 0

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        with psycopg.connect(self.url, autocommit=True, application_name=f"{APP}-watch") as conn:
            while not self._stop.is_set():
                rows = conn.execute(
                    "SELECT coalesce(application_name, ''), coalesce(state, ''), count(*) "
                    "FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid() "
                    "GROUP BY 1, 2",
                    (self.database,),
                ).fetchall()
                locks = conn.execute("SELECT count(*) FROM pg_locks").fetchone()
                now: Counter[str] = Counter()
                busy: Counter[str] = Counter()
                for app, state, count in rows:
                    now[app] += count
                    if state != "idle":
                        busy[app] += count
                for app, count in now.items():
                    self.connections[app] = max(self.connections[app], count)
                for app, count in busy.items():
                    self.busy[app] = max(self.busy[app], count)
                self.total = max(self.total, sum(now.values()))
                self.locks = max(self.locks, int(locks[0]) if locks else 0)
                self.samples += 1
                self._stop.wait(self.interval)


# -- the load -------------------------------------------------------------------------------


@dataclass
class Stage:
    seconds: float
    latencies: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k, _ in MIX})
    statuses: Counter[str] = field(default_factory=Counter)
    # What failed, by kind and status, with the first answer's text: a 503 of a save
    # (no worker answered in time) is not a 503 of a recall.
    failures: dict[str, str] = field(default_factory=dict)
    failed: Counter[str] = field(default_factory=Counter)
    first_searches: list[float] = field(default_factory=list)  # an agent's first request
    missed_searches: list[float] = field(default_factory=list)  # outside serve's cache (est.)
    requests: int = 0
    hot: int = 0  # requests to the hottest tenth of the agents
    missed: int = 0  # requests to an agent outside serve's cache (a simulated LRU)
    recalled: int = 0  # recalls answered with at least one memory
    cpu: dict[str, float] = field(default_factory=dict)
    rate_asked: float = 0.0  # an open loop's arrival rate (requests/s); 0: a closed loop

    @property
    def errors(self) -> int:
        return sum(n for status, n in self.statuses.items() if not status.startswith("2"))

    def record(
        self,
        load: Load,
        agent: str,
        kind: str,
        status: str,
        raw: bytes,
        took: float,
        first: bool,
        missed: bool,
    ) -> None:
        """One answered (or failed) request of the recorded part of the run."""
        self.requests += 1
        self.statuses[status] += 1
        self.hot += agent in load.hot
        self.missed += missed
        if not status.startswith("2"):
            self.fail(kind, status, raw.decode(errors="replace") if raw else status)
            return
        self.latencies[kind].append(took)
        if kind in RECALLS:
            self.recalled += bool(json.loads(raw)[RECALLED[kind]])
        if kind == "search" and first:
            self.first_searches.append(took)
        if kind == "search" and missed:
            self.missed_searches.append(took)

    def fail(self, kind: str, status: str, detail: str) -> None:
        what = f"{kind} {status}"
        self.failed[what] += 1
        self.failures.setdefault(what, detail[:300])

    def rate(self, kinds: Iterable[str]) -> float:
        return sum(len(self.latencies[k]) for k in kinds) / self.seconds


class Load:
    """The requests of a fleet: which agent (Zipf over a shuffled order), what kind, with
    what body; and serve's store cache as the bench sees it (an LRU of the agents asked)."""

    def __init__(
        self, fleet: Fleet, texts: Texts, zipf: float, open_agents: int = SERVE_OPEN_AGENTS
    ) -> None:
        self.fleet, self.texts = fleet, texts
        self.open_agents = open_agents
        order = fleet.agent_ids()
        random.Random(SEED).shuffle(order)
        self.order = order
        self.cum = list(itertools.accumulate(_zipf_weights(len(order), zipf)))
        self.hot = set(order[: max(1, len(order) // 10)])
        self.touched: set[str] = set()
        self.cache: OrderedDict[str, None] = OrderedDict()
        self.saves = itertools.count()

    def draw(self, rng: random.Random) -> tuple[str, str, str, dict[str, Any]]:
        agent = rng.choices(self.order, cum_weights=self.cum)[0]
        kind = rng.choices([k for k, _ in MIX], weights=[w for _, w in MIX])[0]
        if kind == "save":
            entry, _ = self.texts.memory(agent, 1_000_000 + next(self.saves))
            path = f"/v1/agents/{agent}/memories"
            body: dict[str, Any] = {
                "content": entry.content,
                "category": entry.category,
                "importance": entry.importance,
            }
        elif kind == "search":
            path = f"/v1/agents/{agent}/search"
            body = {"query": self.texts.question(agent, self.fleet.memories, rng), "limit": 10}
        else:
            path = f"/v1/agents/{agent}/context"
            question = self.texts.question(agent, self.fleet.memories, rng)
            body = {
                "session": f"s-{agent}",
                "message": f"Can you remind me what we said about {question}?",
            }
        return agent, kind, path, body

    def visit(self, agent: str) -> tuple[bool, bool]:
        """(first request to the agent in this run, outside serve's cache)."""
        first = agent not in self.touched
        self.touched.add(agent)
        missed = agent not in self.cache
        self.cache[agent] = None
        self.cache.move_to_end(agent)
        while len(self.cache) > self.open_agents:
            self.cache.popitem(last=False)
        return first, missed


async def run_load(
    url: str,
    load: Load,
    *,
    concurrency: int,
    seconds: float,
    warmup: float,
    seed: int,
    pids: dict[str, int],
    rate: float = 0.0,
) -> Stage:
    """`concurrency` agents in a closed loop; requests sent in the last `seconds` counted.
    With `rate`: an open loop instead, requests arriving `rate` a second (Poisson), at most
    `concurrency` in flight, each timed from when it was due, so a request held back by a
    full client is counted as waiting, not dropped (no coordinated omission)."""
    stage = Stage(seconds)
    started = time.monotonic()
    record_from = started + warmup
    stop_at = record_from + seconds
    cpu_before: dict[str, float] = {}

    async def one(http: aiohttp.ClientSession, rng: random.Random, due: float) -> None:
        agent, kind, path, body = load.draw(rng)
        first, missed = load.visit(agent)
        try:
            async with http.post(path, json=body) as answer:
                status, raw = str(answer.status), await answer.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            status, raw = type(exc).__name__, b""
        if due >= record_from:
            stage.record(load, agent, kind, status, raw, time.monotonic() - due, first, missed)

    async def agent_loop(http: aiohttp.ClientSession, n: int) -> None:
        rng = random.Random(f"{seed}/{n}")
        while time.monotonic() < stop_at:
            await one(http, rng, time.monotonic())

    async def arrivals(http: aiohttp.ClientSession) -> None:
        rng, room = random.Random(f"{seed}/paced"), asyncio.Semaphore(concurrency)
        due, tasks = time.monotonic(), set()

        async def held(due: float) -> None:
            async with room:
                await one(http, rng, due)

        while due < stop_at:
            due += rng.expovariate(rate)
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            task = asyncio.create_task(held(due))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        await asyncio.gather(*tasks)

    async def mark_cpu() -> None:
        await asyncio.sleep(max(0.0, record_from - time.monotonic()))
        cpu_before.update(cpu_snapshot(pids))

    # aiohttp, not httpx, for the load: at 64 requests in flight httpx's async pool took
    # ~3 ms of CPU per request (~0.15 ms for aiohttp, same server, same run), so the
    # load generator, on the same two cores, was bounding what serve was measured at.
    connector = aiohttp.TCPConnector(limit=concurrency)
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(url, connector=connector, timeout=timeout) as http:
        marker = asyncio.create_task(mark_cpu())
        if rate:
            await arrivals(http)
        else:
            await asyncio.gather(*(agent_loop(http, n) for n in range(concurrency)))
        await marker
    after = cpu_snapshot(pids)
    stage.cpu = {name: after[name] - cpu_before.get(name, 0.0) for name in after}
    return stage


def cpu_snapshot(pids: dict[str, int]) -> dict[str, float]:
    """CPU seconds so far of each process named in `pids`; "postgres" sums the server's
    children (its backends), "bench" is this process."""
    out = {name: cpu_seconds(pid) for name, pid in pids.items() if name != "postgres"}
    if "postgres" in pids:
        out["postgres"] = cpu_seconds(pids["postgres"]) + sum(
            cpu_seconds(child) for child in children(pids["postgres"])
        )
    out["bench"] = sum(os.times()[:2])
    return out


# -- the probes -------------------------------------------------------------------------------


def cold_opens(url: str, load: Load, agents: list[str]) -> tuple[list[float], list[float]]:
    """A search on each agent (never opened by serve), then the same search again."""
    cold, warm = [], []
    rng = random.Random(SEED)
    with httpx.Client(base_url=url, timeout=120) as http:
        for agent in agents:
            body = {"query": load.texts.question(agent, load.fleet.memories, rng), "limit": 10}
            for times in (cold, warm):
                t0 = time.perf_counter()
                answer = http.post(f"/v1/agents/{agent}/search", json=body)
                took = time.perf_counter() - t0
                if answer.status_code != 200:
                    raise SystemExit(f"search on {agent}: {answer.status_code} {answer.text}")
                times.append(took)
    return cold, warm


def forget_over_http(url: str, agents: list[str]) -> list[float]:
    took = []
    with httpx.Client(base_url=url, timeout=600) as http:
        for agent in agents:
            t0 = time.perf_counter()
            answer = http.post(f"/v1/agents/{agent}/forget", json={"whole_agent": True})
            took.append(time.perf_counter() - t0)
            if answer.status_code != 200:
                raise SystemExit(f"forget {agent}: {answer.status_code} {answer.text}")
    return took


def forget_with_cli(env: dict[str, str], agent: str) -> float:
    t0 = time.perf_counter()
    done = subprocess.run(
        [str(BIN / "dreamkeeper"), "--agent", agent, "forget", "--whole-agent"],
        env={**env, "PGAPPNAME": f"{APP}-cli"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    took = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"dreamkeeper forget {agent}: rc {done.returncode}\n{done.stderr}")
    return took


def scrape_metrics(url: str) -> tuple[float, int]:
    t0 = time.perf_counter()
    answer = httpx.get(f"{url}/metrics", timeout=900)
    return time.perf_counter() - t0, answer.status_code


# -- the database's figures ---------------------------------------------------------------------


def database_figures(url: str, database: str) -> dict[str, int]:
    with psycopg.connect(url) as conn:

        def one(sql: str, *params: Any) -> int:
            row = conn.execute(sql, params).fetchone()
            return int(row[0]) if row and row[0] is not None else 0

        return {
            "bytes": one("SELECT pg_database_size(%s)", database),
            "agents": one("SELECT count(*) FROM dk_memory_agent"),
            "entries": one("SELECT count(*) FROM dk_memory"),
            "feed rows": one("SELECT count(*) FROM dk_memory_feed"),
            "fewest entries of an agent": one(
                "SELECT min(n) FROM (SELECT count(*) AS n FROM dk_memory GROUP BY agent_id) c"
            ),
            "data keys": one("SELECT count(*) FROM dreamkeeper_agent_keys"),
            "sealed entries": one("SELECT count(*) FROM dk_memory WHERE sealed IS NOT NULL"),
        }


def server_log_alarms(path: Path, offset: int) -> dict[str, int]:
    try:
        with path.open("rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
    except OSError:
        return {}
    return {needle: text.count(needle) for needle in LOG_ALARMS}


# -- profiling ---------------------------------------------------------------------------------


def start_profile(pid: int, seconds: float, out: Path) -> subprocess.Popen | None:
    spy = shutil.which("py-spy", path=str(BIN)) or shutil.which("py-spy")
    if spy is None:
        print("--profile: py-spy is not installed (pip install py-spy); no profile", flush=True)
        return None
    return subprocess.Popen(
        [spy, "record", "--pid", str(pid), "--rate", "100", "--duration", str(int(seconds))]
        + ["--format", "raw", "--output", str(out), "--nonblocking"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _frame_name(frame: str) -> str:
    name, _, where = frame.partition(" (")
    return f"{name} ({Path(where.rstrip(')').rsplit(':', 1)[0]).name})"


def summarize_profile(path: Path, top: int = 20) -> list[str]:
    """py-spy's collapsed stacks: the share of samples a function is on the stack
    (inclusive) and at its top (self)."""
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    total = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        # "function (path:line)" -> "function (file)": a function counts once per stack
        frames = [_frame_name(f) for f in stack.split(";")]
        for frame in set(frames):
            inclusive[frame] += n
        own[frames[-1]] += n
    if not total:
        return ["(no samples)"]
    lines = [f"{total} samples"]
    lines += ["inclusive:"] + [
        f"  {100 * n / total:5.1f}%  {frame}" for frame, n in inclusive.most_common(top)
    ]
    lines += ["self:"] + [
        f"  {100 * n / total:5.1f}%  {frame}" for frame, n in own.most_common(top)
    ]
    return lines


# -- one fleet size ----------------------------------------------------------------------------


@dataclass
class Result:
    fleet: Fleet
    loaded: Stage
    one_at_a_time: Stage
    paced: Stage | None
    cold: list[float]
    warm: list[float]
    forget_http: list[float]
    forget_cli: float
    restore_s: float
    restored: int
    scrape: tuple[float, int] | None
    scrape_rss: tuple[float, float] | None
    rss: dict[str, tuple[float, float]]
    db: dict[str, int]
    watch: DatabaseWatch
    alarms: dict[str, int]
    service_logs: dict[str, int]
    startup_s: float
    load_average: tuple[float, float]
    open_agents: int = SERVE_OPEN_AGENTS
    profile: list[str] = field(default_factory=list)

    @property
    def errors(self) -> int:
        stages = (self.loaded, self.one_at_a_time, self.paced)
        return sum(stage.errors for stage in stages if stage is not None)


def drive(
    args: argparse.Namespace, url: str, load: Load, pids: dict[str, int]
) -> tuple[Stage, Stage, Stage | None]:
    """The load at `--concurrency` (closed loop), then the same requests one at a time,
    then (`--paced-rate`) arriving at that rate."""

    def stage(seed: int, concurrency: int, seconds: float, warmup: float, rate: float = 0.0):
        return asyncio.run(
            run_load(
                url,
                load,
                concurrency=concurrency,
                seconds=seconds,
                warmup=warmup,
                seed=seed,
                pids=pids,
                rate=rate,
            )
        )

    loaded = stage(SEED, args.concurrency, args.seconds, args.warmup)
    print(f"  load: {loaded.requests:,} requests recorded", flush=True)
    single = stage(SEED + 1, 1, args.sequential_seconds, 0)
    paced = None
    # Paced below what the closed loop carried: above it, an open loop's queue (and so
    # its latency) grows for as long as it runs, and says nothing more.
    rate = args.paced_rate or args.paced_share * loaded.requests / loaded.seconds
    if rate > 0:
        paced = stage(SEED + 2, args.concurrency, args.paced_seconds, 5, rate)
        paced.rate_asked = rate
        print(f"  paced at {rate:.1f}/s: {paced.requests:,} requests", flush=True)
    return loaded, single, paced


def profile_summary(spy: subprocess.Popen | None, out: Path) -> list[str]:
    if spy is None:
        return []
    spy.wait(timeout=120)
    return summarize_profile(out) if out.exists() else ["(no profile written)"]


def watched_pids(services: Services, temporal: TemporalServer, cluster: Any) -> dict[str, int]:
    """The processes whose CPU the load's figures report."""
    pids = {**services.pids(), "temporal": temporal.proc.pid}
    postgres_pid = cluster.pid()
    if postgres_pid is not None:
        pids["postgres"] = postgres_pid
    return pids


def scrape_with_rss(
    services: Services, wanted: bool
) -> tuple[tuple[float, int] | None, tuple[float, float] | None]:
    """GET /metrics (time, status) and serve's RSS before and after, when `wanted`."""
    if not wanted:
        return None, None
    before = services.rss_mb()["serve"][0]
    scrape = scrape_metrics(services.url)
    return scrape, (before, services.rss_mb()["serve"][0])


def run_fleet(args: argparse.Namespace, cluster: Any, layout: Layout, fleet: Fleet, url: str,
              temporal: TemporalServer, texts: Texts, profile: bool) -> Result:  # fmt: skip
    env = layout.env(url)
    log_offset = (cluster.root / "server.log").stat().st_size
    queue = f"fleet-{fleet.database}".replace("_", "-")
    services = Services(
        env,
        temporal.address,
        queue,
        layout.logs,
        serve_worker=args.serve_worker,
        open_agents=args.open_agents,
    )
    watch = DatabaseWatch(url, fleet.database)
    load_before = os.getloadavg()[0]
    try:
        startup = services.wait_ready()
        print(f"  serve and 2 workers ready in {startup:.1f} s", flush=True)
        pids = watched_pids(services, temporal, cluster)
        load = Load(fleet, texts, args.zipf, args.open_agents)
        watch.start()
        spy = None
        out = layout.logs / f"profile-{fleet.database}.txt"
        if profile:
            spy = start_profile(services.procs["serve"].pid, args.seconds, out)
        loaded, single, paced = drive(args, services.url, load, pids)
        watch.stop()
        profile_lines = profile_summary(spy, out)
        probes = fleet.probe_ids()
        n_cold = max(1, len(probes) // 2)
        cold, warm = cold_opens(services.url, load, probes[:n_cold])
        doomed = probes[n_cold : n_cold + 3]
        forgotten_http = forget_over_http(services.url, doomed)
        cli_agent = probes[n_cold + 3] if len(probes) > n_cold + 3 else None
        forgotten_cli = forget_with_cli(services.env, cli_agent) if cli_agent else float("nan")
        restored = [*doomed, *([cli_agent] if cli_agent else [])]
        restore = load_with_env(url, layout, fleet, restored)
        scrape, scrape_rss = scrape_with_rss(services, fleet.agents <= args.scrape_up_to)
        rss = services.rss_mb()
        service_logs = services.log_lines(("Traceback", " ERROR ", " WARNING "))
    finally:
        watch.stop()
        services.stop()
    return Result(
        fleet=fleet,
        loaded=loaded,
        one_at_a_time=single,
        paced=paced,
        cold=cold,
        warm=warm,
        forget_http=forgotten_http,
        forget_cli=forgotten_cli,
        restore_s=restore,
        restored=len(restored),
        scrape=scrape,
        scrape_rss=scrape_rss,
        rss=rss,
        db=database_figures(url, fleet.database),
        watch=watch,
        alarms=server_log_alarms(cluster.root / "server.log", log_offset),
        service_logs=service_logs,
        startup_s=startup,
        load_average=(load_before, os.getloadavg()[0]),
        open_agents=args.open_agents,
        profile=profile_lines,
    )


def load_with_env(url: str, layout: Layout, fleet: Fleet, agents: list[str]) -> float:
    """Load `agents` again (the forgotten probes) in this process."""
    _loader_start(url, str(layout.data), fleet.memories)
    t0 = time.perf_counter()
    _load_agents(agents)
    return time.perf_counter() - t0


# -- the report --------------------------------------------------------------------------------


def ms(values: list[float], q: float) -> str:
    return f"{1e3 * percentile(values, q):.1f}" if values else "-"


def pcts(values: list[float]) -> str:
    return "/".join(ms(values, q) for q in (0.5, 0.95, 0.99)) if values else "-"


def print_fleet(r: Result) -> None:
    f, s, one = r.fleet, r.loaded, r.one_at_a_time
    print(f"\n== {f.agents:,} agents x {f.memories} memories ({f.database}) ==")
    print(
        f"load: {s.requests:,} requests in {s.seconds:.0f} s at concurrency; hottest tenth "
        f"of the agents got {s.hot / max(1, s.requests):.0%}; outside serve's "
        f"{r.open_agents}-agent cache (estimated): {s.missed / max(1, s.requests):.0%}"
    )
    for kind, _ in MIX:
        print(
            f"  {kind:8s} p50/p95/p99 {pcts(s.latencies[kind]):>22s} ms  "
            f"({len(s.latencies[kind]):,} ok; one at a time: {pcts(one.latencies[kind])} ms)"
        )
    recalls = sum(len(s.latencies[k]) for k in RECALLS)
    print(
        f"  recalls/s {s.rate(RECALLS):.1f}, saves/s {s.rate(['save']):.1f} "
        f"(one at a time: {one.rate(RECALLS):.1f} recalls/s); recalls that found a memory: "
        f"{s.recalled / max(1, recalls):.0%}"
    )
    print(
        f"  first search of an agent during the load: {len(s.first_searches)}, p50/p95/p99 "
        f"{pcts(s.first_searches)} ms; searches outside serve's cache (est.): "
        f"{len(s.missed_searches)}, p50/p95/p99 {pcts(s.missed_searches)} ms"
    )
    print(f"  errors: {s.errors + one.errors} ({dict(s.statuses + one.statuses)})")
    for what, n in sorted((s.failed + one.failed).items()):
        print(f"    {what}: {n}, first: {(s.failures | one.failures)[what]}")
    cpu = ", ".join(
        f"{k} {v:.0f} ({v / s.seconds:.2f} cores)"
        for k, v in sorted(s.cpu.items(), key=lambda kv: -kv[1])
    )
    print(f"  CPU seconds during the {s.seconds:.0f} s load: {cpu}")
    print_probes(r)


def print_probes(r: Result) -> None:
    """What came after the load: cold opens, forgets, the scrape, RSS, the database."""
    f = r.fleet
    print(
        f"cold open (first search of an agent serve never opened, nothing else running): "
        f"p50 {ms(r.cold, 0.5)} ms, max {1e3 * max(r.cold):.1f} ms over {len(r.cold)}; the same "
        f"search again p50 {ms(r.warm, 0.5)} ms"
    )
    print(
        f"forget whole agent (cold, {f.memories} memories) over HTTP: "
        + ", ".join(f"{t:.2f}" for t in r.forget_http)
        + f" s; with the CLI (a new process): {r.forget_cli:.2f} s; loading the "
        f"{r.restored} again took {r.restore_s:.2f} s"
    )
    if r.scrape is not None and r.scrape_rss is not None:
        print(
            f"GET /metrics: {r.scrape[0]:.1f} s (status {r.scrape[1]}); serve RSS "
            f"{r.scrape_rss[0]:.0f} -> {r.scrape_rss[1]:.0f} MB"
        )
    rss = ", ".join(f"{n} {now:.0f} (peak {peak:.0f})" for n, (now, peak) in sorted(r.rss.items()))
    print(f"RSS MB: {rss}")
    db = r.db
    print(
        f"database: {db['bytes'] / 2**20:,.0f} MB; {db['agents']:,} agents, {db['entries']:,} "
        f"entries ({db['sealed entries']:,} sealed), {db['feed rows']:,} feed rows, "
        f"{db['data keys']:,} data keys; fewest entries of an agent {db['fewest entries of an agent']}"
    )
    w = r.watch
    conns = ", ".join(f"{app or '?'} {n}" for app, n in sorted(w.connections.items()))
    busy = ", ".join(f"{app or '?'} {n}" for app, n in sorted(w.busy.items()))
    print(
        f"connections (most seen, {w.samples} samples): {conns}; total {w.total}; busy at once: "
        f"{busy or 'none'}; pool size per process {POOL_MAX} + {POOL_MAX} readers"
    )
    print(f"locks (most seen in pg_locks): {w.locks}")
    print(f"server log: {r.alarms}; serve/worker logs: {r.service_logs}")
    print(
        f"machine: load average {r.load_average[0]:.1f} before, {r.load_average[1]:.1f} after; "
        f"startup {r.startup_s:.1f} s"
    )
    if r.profile:
        print("serve profile (py-spy):")
        for line in r.profile:
            print(f"  {line}")


def target(ok: bool) -> str:
    return "met" if ok else "MISSED"


def data_holds(r: Result, sealed: bool) -> bool:
    """Whether the database holds every agent loaded with all its memories (and more:
    the load's saves), every entry sealed when the run seals."""
    f, db = r.fleet, r.db
    agents = db["agents"] == f.agents + f.probes
    memories = db["fewest entries of an agent"] >= f.memories
    all_sealed = db["sealed entries"] == db["entries"] if sealed else db["sealed entries"] == 0
    ok = agents and memories and all_sealed
    print(
        f"data check: {db['agents']:,} agents of {f.agents + f.probes:,} loaded; fewest "
        f"memories of an agent {db['fewest entries of an agent']} of {f.memories}; "
        f"{db['sealed entries']:,} of {db['entries']:,} entries sealed: "
        + ("holds what was loaded" if ok else "CHECK FAILED")
    )
    return ok


def print_table(results: list[Result]) -> None:
    cols = [f"{r.fleet.agents:,}" for r in results]

    def row(label: str, cells: list[str], goal: str = "") -> None:
        print(f"| {label} | " + " | ".join(cells) + f" | {goal} |")

    print("\n| figure | " + " | ".join(cols) + " | target |")
    print("|---|" + "---|" * len(cols) + "---|")
    for kind, _ in MIX:
        row(f"{kind} p50/p95/p99 ms", [pcts(r.loaded.latencies[kind]) for r in results])
    row(
        f"{'search'} p50/p95 ms, one at a time",
        [
            f"{ms(r.one_at_a_time.latencies['search'], 0.5)}/"
            f"{ms(r.one_at_a_time.latencies['search'], 0.95)}"
            for r in results
        ],
    )
    for kind in RECALLS:
        row(
            f"{kind} p50/p95/p99 ms, paced (open loop)",
            [pcts(r.paced.latencies[kind]) if r.paced else "-" for r in results],
        )
    row(
        "paced: requests/s asked; recalls/s answered",
        [
            f"{r.paced.rate_asked:.1f}; {r.paced.rate(RECALLS):.1f}" if r.paced else "-"
            for r in results
        ],
    )
    row("recalls/s", [f"{r.loaded.rate(RECALLS):.1f}" for r in results], ">= 150")
    row("saves/s", [f"{r.loaded.rate(['save']):.1f}" for r in results])
    row("cold open p50/max ms", [f"{ms(r.cold, 0.5)}/{1e3 * max(r.cold):.0f}" for r in results])
    row("forget whole agent, HTTP, max s", [f"{max(r.forget_http):.2f}" for r in results], "<= 2 s")
    row("forget whole agent, CLI s", [f"{r.forget_cli:.2f}" for r in results])
    for name in ("serve", "worker-0", "worker-1"):
        row(f"{name} peak RSS MB", [f"{r.rss[name][1]:.0f}" for r in results])
    row("database MB", [f"{r.db['bytes'] / 2**20:,.0f}" for r in results])
    row(
        "connections serve/w0/w1 (busy)",
        [
            "/".join(
                f"{r.watch.connections[f'{APP}-{n}']}({r.watch.busy[f'{APP}-{n}']})"
                for n in ("serve", "worker-0", "worker-1")
            )
            for r in results
        ],
    )
    row("locks, most", [str(r.watch.locks) for r in results])
    row("errors", [str(r.errors) for r in results], "0")
    row(
        "out of shared memory / too many connections",
        [
            f"{r.alarms.get(LOG_ALARMS[0], 0)}/"
            f"{r.alarms.get(LOG_ALARMS[1], 0) + r.alarms.get(LOG_ALARMS[2], 0)}"
            for r in results
        ],
        "0/0",
    )
    print()
    print_targets(results)


def print_targets(results: list[Result]) -> None:
    """Each issue-35 target beside its figure: met or MISSED."""
    small, large = results[0], results[-1]
    for kind in RECALLS:
        p99s = (
            percentile(small.loaded.latencies[kind], 0.99),
            percentile(large.loaded.latencies[kind], 0.99),
        )
        ratio = p99s[1] / p99s[0] if p99s[0] else float("nan")
        print(
            f"target: {kind} p99 at {large.fleet.agents:,} <= 1.5x p99 at "
            f"{small.fleet.agents:,}: {ratio:.2f}x ({target(ratio <= 1.5)})"
        )
    for how, stage in (("closed loop", large.loaded), ("paced", large.paced)):
        if stage is None:
            continue
        search = stage.latencies["search"]
        p50, p95 = 1e3 * percentile(search, 0.5), 1e3 * percentile(search, 0.95)
        print(
            f"target: search p50 <= 20 ms at {large.fleet.agents:,} ({how}): {p50:.1f} ms "
            f"({target(p50 <= 20)}); p95 <= 50 ms: {p95:.1f} ms ({target(p95 <= 50)})"
        )
    for r in results:
        rate = r.loaded.rate(RECALLS)
        print(f"target: >= 150 recalls/s at {r.fleet.agents:,}: {rate:.1f} ({target(rate >= 150)})")
    worst = max(large.forget_http)
    print(
        f"target: whole-agent forget <= 2 s at {large.fleet.agents:,}: {worst:.2f} s "
        f"({target(worst <= 2)})"
    )
    errors = sum(r.errors for r in results)
    alarms = sum(sum(r.alarms.values()) for r in results)
    print(f"target: no error: {errors} ({target(errors == 0)})")
    print(f"target: no lock-table or connection exhaustion: {alarms} ({target(alarms == 0)})")


# -- main --------------------------------------------------------------------------------------


def main(args: argparse.Namespace) -> int:
    if args.backend != "postgres":
        raise SystemExit("the fleet bench runs on PostgreSQL only (--backend postgres)")
    sizes = [int(n) for n in args.agents.split(",")]
    layout = Layout(Path(args.data_dir), sealed=not args.no_seal)
    layout.prepare(args.rebuild)
    print(
        f"fleet bench {datetime.now(UTC):%Y-%m-%d %H:%M} UTC: sizes {sizes}, {args.memories} "
        f"memories each, {'sealed at rest' if layout.sealed else 'NOT sealed (--no-seal)'}; "
        f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    cluster = kept_cluster(layout.cluster)
    cluster.start()
    temporal = None
    failed = False
    try:
        fleets = [Fleet(n, args.memories, args.probes, layout.sealed) for n in sizes]
        urls = {}
        for fleet in fleets:
            env = layout.env(cluster.url(fleet.database))
            os.environ.clear()
            os.environ.update(env)
            url, took, loaded = build(cluster, layout, fleet, args.load_procs)
            urls[fleet] = url
            print(
                f"build {fleet.database}: "
                + (f"{loaded:,} agents written in {took:.0f} s" if loaded else "already built"),
                flush=True,
            )
        if args.build_only:
            return 0
        started = time.perf_counter()
        temporal = TemporalServer(layout.logs)
        texts = Texts()
        results = []
        for fleet in fleets:
            os.environ.clear()
            os.environ.update(layout.env(urls[fleet]))
            print(f"\nrunning {fleet.database} ...", flush=True)
            profile = args.profile and fleet is fleets[-1]
            result = run_fleet(args, cluster, layout, fleet, urls[fleet], temporal, texts, profile)
            print_fleet(result)
            results.append(result)
            failed |= not data_holds(result, layout.sealed)
            failed |= bool(result.errors)
        print_table(results)
        print(f"\nthe {len(results)} sizes ran in {time.perf_counter() - started:.0f} s")
    finally:
        if temporal is not None:
            temporal.stop()
        cluster.stop()
    return 1 if failed else 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--backend", choices=["postgres"], default="postgres")
    parser.add_argument("--agents", default="100,1000,10000", help="fleet sizes, in order")
    parser.add_argument("--memories", type=int, default=200)
    parser.add_argument("--probes", type=int, default=16, help="agents the load never touches")
    parser.add_argument("--concurrency", type=int, default=64, help="agents at once")
    parser.add_argument("--seconds", type=float, default=120, help="recorded load per size")
    parser.add_argument("--warmup", type=float, default=15)
    parser.add_argument("--sequential-seconds", type=float, default=15)
    parser.add_argument(
        "--paced-share",
        type=float,
        default=0.5,
        help="the open-loop stage's rate as a share of the closed loop's requests/s (0: none)",
    )
    parser.add_argument(
        "--paced-rate", type=float, default=0, help="the open-loop stage's requests/s instead"
    )
    parser.add_argument("--paced-seconds", type=float, default=30)
    parser.add_argument("--zipf", type=float, default=1.0, help="exponent of the agents' draw")
    parser.add_argument("--no-seal", action="store_true", help="no payload key: plaintext rows")
    parser.add_argument("--rebuild", action="store_true", help="delete the kept data first")
    parser.add_argument("--build-only", action="store_true", help="build the data, then stop")
    parser.add_argument("--load-procs", type=int, default=2)
    parser.add_argument("--scrape-up-to", type=int, default=1000, help="GET /metrics up to N")
    parser.add_argument("--profile", action="store_true", help="py-spy on serve, largest size")
    parser.add_argument("--data-dir", default=str(DATA))
    parser.add_argument(
        "--open-agents",
        type=int,
        default=SERVE_OPEN_AGENTS,
        help="serve's store cache (DREAMKEEPER_SERVE_MAX_OPEN_AGENTS)",
    )
    parser.add_argument(
        "--serve-worker", action="store_true", help="serve runs a worker too (the old layout)"
    )
    args = parser.parse_args(argv)
    if args.probes < 4:
        parser.error("--probes must be at least 4 (cold opens, and forgets over HTTP and CLI)")
    return args


if __name__ == "__main__":
    raise SystemExit(main(parse_args()))
