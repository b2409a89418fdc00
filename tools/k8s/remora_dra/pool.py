"""The Remora side of the driver: a pool of Remora servers, through remoractl's admin API
(any server of the pool answers for the whole pool; docs/OPERATIONS.md, "A pool of servers").

RemoraPool is the interface the controller and the plugin use; Remoractl implements it by
running remoractl --json. Tests put a fake in its place."""

import json
import subprocess


class RemoraError(Exception):
    """A refusal or failure of the pool, with remoractl's one-line message."""


class RemoraPool:
    """What the driver asks of a Remora pool."""

    def status(self):
        """`remoractl --json pool status`: {"servers": [...], "gpus": [...], ...}."""
        raise NotImplementedError

    def tenants(self):
        """Names of the pool's tenants."""
        raise NotImplementedError

    def create_tenant(self, name, memory_per_gpu=None, pool_memory=None):
        """Creates a tenant of the pool (bytes, None = unlimited); returns its token."""
        raise NotImplementedError

    def attach_gpu(self, tenant, server, gpu):
        """Gives the tenant GPU `gpu` (index) of `server`."""
        raise NotImplementedError

    def delete_tenant(self, name):
        """Deletes the tenant, ending its sessions; a tenant that does not exist is not an error."""
        raise NotImplementedError


class Remoractl(RemoraPool):
    """remoractl against one server of the pool: `admin` is its admin URL (tcp://HOST:PORT, with
    the admin token file) or its state directory (on that host)."""

    def __init__(self, remoractl="remoractl", admin=None, token_file=None, state_dir=None, timeout=60):
        self.base = [remoractl, "--json"]
        if admin:
            self.base += ["--admin", admin]
            if token_file:
                self.base += ["--admin-token-file", token_file]
        elif state_dir:
            self.base += ["--state-dir", state_dir]
        self.timeout = timeout

    def _run(self, *args):
        p = subprocess.run(self.base + list(args), capture_output=True, text=True, timeout=self.timeout)
        if p.returncode != 0:
            raise RemoraError((p.stderr.strip() or p.stdout.strip() or "remoractl failed").removeprefix("remoractl: "))
        return json.loads(p.stdout) if p.stdout.strip() else None

    def status(self):
        return self._run("pool", "status")

    def tenants(self):
        return [t["name"] for t in self._run("pool", "tenants")]

    def create_tenant(self, name, memory_per_gpu=None, pool_memory=None):
        args = ["tenant", "create", name, "--gpus", "none"]
        if memory_per_gpu is not None:
            args += ["--memory", str(memory_per_gpu)]
        if pool_memory is not None:
            args += ["--pool-memory", str(pool_memory)]
        return self._run(*args)["token"]

    def attach_gpu(self, tenant, server, gpu):
        self._run("pool", "attach", tenant, "--server", server, "--gpu", str(gpu))

    def delete_tenant(self, name):
        if name not in self.tenants():
            return
        self._run("tenant", "delete", name, "--force")
