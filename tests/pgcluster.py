"""A throwaway PostgreSQL cluster for tests and CI: initdb in a directory, a
Unix socket there (no TCP port), stopped and removed at the end.

The distribution's binaries (Debian: /usr/lib/postgresql/N/bin) are found by
themselves; PostgreSQL refuses to run as root, so as root it runs as the
`postgres` user the package creates. .ci/run uses this module too:

    python tests/pgcluster.py start DIR   # prints the DSN
    python tests/pgcluster.py stop DIR
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

HOW = ("install PostgreSQL (Debian/Ubuntu: apt-get install postgresql) or set POOL_TEST_POSTGRES_DSN "
       "to a database the tests may create schemas in; .ci/run does the first")


def binaries() -> Path | None:
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if (Path(candidate) / "initdb").is_file():
            return Path(candidate)
    found = shutil.which("initdb")
    return Path(found).parent if found else None


class Cluster:
    def __init__(self, directory: Path) -> None:
        self.dir = Path(directory)
        self.data = self.dir / "data"
        self.bin = binaries()
        self.dsn = f"host={self.dir} port=5432 user=postgres dbname=postgres"

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        command = [str(self.bin / args[0]), *args[1:]]
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        return subprocess.run(command, capture_output=True, text=True, check=check, timeout=120,
                              stdin=subprocess.DEVNULL, cwd="/")

    def init(self) -> Cluster:
        if self.bin is None:
            raise RuntimeError(f"no PostgreSQL binaries: {HOW}")
        self.dir.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(self.dir, user.pw_uid, user.pw_gid)
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8")
        return self

    def start(self) -> Cluster:
        options = f"-k {self.dir} -c listen_addresses='' -c port=5432 -c max_connections=200"
        done = self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.dir / "server.log"),
                         "-w", "-t", "60", "start", check=False)
        if done.returncode != 0:
            raise RuntimeError(f"pg_ctl start failed: {done.stderr or done.stdout}: {self.log()}")
        return self

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop", check=False)

    def restart(self) -> None:
        self.stop()
        self.start()

    def remove(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)

    def log(self) -> str:
        path = self.dir / "server.log"
        return path.read_text()[-2000:] if path.exists() else ""


def scratch() -> Path:
    """A directory the server's user can reach (pytest's tmp_path is private
    to the user running the tests) with a short path (the socket lives in it)."""
    return Path(tempfile.mkdtemp(prefix="pool-pg-"))


def fresh_schema(dsn: str) -> str:
    """A new empty schema; the DSN that puts a connection in it."""
    import psycopg
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {name}")
    return f"{dsn} options=-csearch_path={name}"


if __name__ == "__main__":
    verb, where = sys.argv[1], Path(sys.argv[2])
    cluster = Cluster(where)
    if verb == "start":
        cluster.init().start()
        print(cluster.dsn)
    else:
        cluster.remove()
