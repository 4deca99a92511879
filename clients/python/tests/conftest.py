"""A real hpo-server for the client's tests.

It is started once per run on loopback with free ports (--http/--grpc
127.0.0.1:0; it writes the ports it got to --port-file), a fresh SQLite file
in a temporary directory, and a random token given in its environment, as
testing/server_process.h does for the C++ tests. The binary is $HPO_SERVER_BIN
(ctest passes it), else build/server/hpo-server of this checkout.

The package is imported from this checkout (clients/python), not from an
installed copy, so the tests test the code beside them.
"""

import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

CLIENT_DIR = Path(__file__).resolve().parents[1]
REPO = CLIENT_DIR.parents[1]
sys.path.insert(0, str(CLIENT_DIR))

import heterotune  # noqa: E402


class Server:
    def __init__(self, binary, directory):
        self.dir = Path(directory)
        self.token = secrets.token_hex(16)
        self.log_path = self.dir / "server.log"
        port_file = self.dir / "ports.json"
        env = {k: v for k, v in os.environ.items() if not k.startswith("HPO_")}
        env["HPO_TOKEN"] = self.token  # not on the command line, as the README advises
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen(
                [binary, "--store", f"sqlite://{self.dir}/hpo.db", "--http", "127.0.0.1:0", "--grpc",
                 "127.0.0.1:0", "--port-file", str(port_file), "--log-level", "warn"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        # Up to 60 s: under the sanitizers and a loaded machine startup is slow.
        for _ in range(600):
            if self.proc.poll() is not None:
                raise RuntimeError(f"hpo-server exited with {self.proc.returncode}:\n{self.log()}")
            try:
                ports = json.loads(port_file.read_text())
                self.url = f"http://127.0.0.1:{ports['http']}"
                return
            except (OSError, ValueError, KeyError):
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"hpo-server wrote no {port_file} within 60 s:\n{self.log()}")

    def log(self):
        try:
            return self.log_path.read_text()
        except OSError:
            return ""

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    binary = os.environ.get("HPO_SERVER_BIN") or str(REPO / "build" / "server" / "hpo-server")
    if not os.access(binary, os.X_OK):
        if "HPO_SERVER_BIN" in os.environ:
            pytest.fail(f"HPO_SERVER_BIN={binary} is not an executable")
        pytest.skip(f"no hpo-server at {binary} (build it, or set HPO_SERVER_BIN)")
    s = Server(binary, tmp_path_factory.mktemp("hpo-server"))
    yield s
    s.stop()
    assert s.proc.returncode == 0, f"hpo-server exited with {s.proc.returncode} on SIGTERM:\n{s.log()}"


@pytest.fixture
def client(server):
    return heterotune.Client(server.url, server.token)
