"""A throwaway PostgreSQL cluster for tests and benches, on 127.0.0.1 and a free port.

The server refuses to run as root, so as root (CI) every server command runs as the
`postgres` user (`runuser`), in a directory that user owns. It is stopped by the pid in
its `postmaster.pid`, never by name: other clusters on the machine are not ours.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg
import psycopg.sql

ENV_BINDIR = "DREAMKEEPER_PG_BINDIR"


def find_bindir() -> Path | None:
    """Where initdb/pg_ctl/postgres are: $DREAMKEEPER_PG_BINDIR, the newest
    /usr/lib/postgresql/*/bin, or pg_ctl on PATH."""
    candidates = []
    if os.environ.get(ENV_BINDIR):
        candidates.append(Path(os.environ[ENV_BINDIR]))
    versions = sorted(
        glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name), reverse=True
    )
    candidates += [Path(p) for p in versions]
    on_path = shutil.which("pg_ctl")
    if on_path:
        candidates.append(Path(on_path).parent)
    for bindir in candidates:
        if (bindir / "initdb").exists() and (bindir / "pg_ctl").exists():
            return bindir
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresCluster:
    """initdb + pg_ctl in a temporary directory; `url(name)` for a database in it."""

    def __init__(self, bindir: Path, *, durable: bool = False) -> None:
        self.bindir = bindir
        self.durable = durable  # False: fsync off (tests); a process kill loses nothing
        self.root = Path(tempfile.mkdtemp(prefix="dk-pg-"))
        self.data = self.root / "data"
        self.port = free_port()
        self._as_root = os.geteuid() == 0
        if self._as_root:
            shutil.chown(self.root, "postgres", "postgres")
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "-E", "UTF8")

    def _run(self, tool: str, *args: str) -> None:
        command = [str(self.bindir / tool), *args]
        if self._as_root:
            command = ["runuser", "-u", "postgres", "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, cwd=self.root)
        if done.returncode != 0:
            raise RuntimeError(f"{tool} failed ({done.returncode}): {done.stderr or done.stdout}")

    def start(self) -> None:
        options = [
            f"-p {self.port}",
            f"-k {self.root}",
            "-c listen_addresses=127.0.0.1",
            "-c max_connections=200",
        ]
        if not self.durable:
            options += ["-c fsync=off", "-c full_page_writes=off", "-c synchronous_commit=off"]
        self._run(
            "pg_ctl", "-D", str(self.data), "-l", str(self.root / "server.log"),
            "-o", " ".join(options), "-w", "-t", "60", "start",
        )  # fmt: skip

    def pid(self) -> int | None:
        try:
            return int((self.data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def stop(self, *, immediate: bool = False) -> None:
        """Stop the server by its pid: SIGINT (fast: sessions end, a clean shutdown) or
        SIGQUIT (immediate: like a crash, recovery on the next start)."""
        pid = self.pid()
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGQUIT if immediate else signal.SIGINT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)
        raise RuntimeError(f"postgres {pid} did not stop")

    def restart(self, *, immediate: bool = True) -> None:
        self.stop(immediate=immediate)
        self.start()

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def create_database(self, name: str) -> str:
        """A new empty database; its URL."""
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def add_password_role(self, name: str, password: str) -> str:
        """A login role that must give `password` over TCP (scram-sha-256, ahead of the
        cluster's trust rules), owning a database of its name; that database's URL, without
        a password."""
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(
                psycopg.sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                    psycopg.sql.Identifier(name), psycopg.sql.Literal(password)
                )
            )
            conn.execute(
                psycopg.sql.SQL("CREATE DATABASE {} OWNER {}").format(
                    psycopg.sql.Identifier(name), psycopg.sql.Identifier(name)
                )
            )
            hba = self.data / "pg_hba.conf"
            rule = f"host all {name} 127.0.0.1/32 scram-sha-256\n"
            hba.write_text(rule + hba.read_text())  # the first matching rule decides
            conn.execute("SELECT pg_reload_conf()")
        url = f"postgresql://{name}@127.0.0.1:{self.port}/{name}"
        deadline = time.monotonic() + 30  # the server reloads its rules asynchronously
        while time.monotonic() < deadline:
            try:
                psycopg.connect(url, password=password + "-not").close()
            except psycopg.OperationalError:
                return url
            time.sleep(0.05)
        raise RuntimeError(f"the cluster did not start asking {name} for a password")

    def destroy(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)
