"""A throwaway PostgreSQL server for tests: Debian's own binaries (`initdb`, `pg_ctl`), a cluster in
a temp folder on a free loopback port, trust authentication, its unix socket in that folder, torn
down at the end of the session. `initdb` refuses to run as root, so under root the server runs as
`nobody`. Where no server binary exists the tests that need one skip, saying so."""

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

SKIP_REASON = ("no PostgreSQL server binaries (initdb, pg_ctl) under /usr/lib/postgresql/*/bin or $SLLM_PG_BIN: "
               "install Debian's `postgresql` package to run the PostgreSQL tests")


def find_bin() -> Path | None:
    """The newest PostgreSQL binaries folder, or None."""
    given = os.environ.get("SLLM_PG_BIN")
    candidates = [given] if given else sorted(glob.glob("/usr/lib/postgresql/*/bin"),
                                              key=lambda p: int(Path(p).parent.name) if Path(p).parent.name.isdigit()
                                              else 0)
    for folder in reversed(candidates):
        if (Path(folder) / "initdb").exists() and (Path(folder) / "pg_ctl").exists():
            return Path(folder)
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresCluster:
    """`start()` initialises and starts the cluster; `new_database()` gives a fresh database's URL."""

    def __init__(self, bin_dir: Path):
        self.bin = bin_dir
        self.root = Path(tempfile.mkdtemp(prefix="sllm-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self._as_user: list[str] = []
        if os.geteuid() == 0:
            # The server may not run as root: the folder goes to `nobody`, and so does the server.
            os.chmod(self.root, 0o700)
            os.chown(self.root, 65534, 65534)
            self._as_user = ["runuser", "-u", "nobody", "--"]

    def _run(self, *cmd: str) -> None:
        done = subprocess.run([*self._as_user, *cmd], capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}): {done.stdout}{done.stderr}")

    def start(self) -> None:
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres", "-E", "UTF8",
                  "--no-locale", "--no-sync")
        # Durability settings off: a test cluster is thrown away, and fsyncs would dominate its time.
        options = (f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
                   "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200")
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", options, "-l", str(self.root / "server.log"),
                  "-w", "-t", "60", "start")

    def url(self, database: str, driver: str = "postgresql+asyncpg") -> str:
        return f"{driver}://postgres@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        name = f"t_{uuid.uuid4().hex[:12]}"
        done = subprocess.run([str(self.bin / "createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres",
                               name], capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise RuntimeError(f"createdb failed: {done.stderr}")
        return self.url(name)

    def stop(self) -> None:
        try:
            self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
