"""A kernel for one notebook, fenced in, and nothing of it left behind.

Each notebook gets a fresh Python kernel with a temporary HOME, working folder and TMPDIR
(what its cells write with relative paths or `~` lands there and is deleted after), an
optional limit on its address space (`RLIMIT_AS`, inherited by every process it starts), and
IPC sockets in a private folder instead of TCP ports (nothing listens on the network, so the
kernel has no reason to warn about unencrypted TCP). When the notebook is done, the kernel,
its process group, every process descended from it and every process that still carries
this run's marker in its environment are killed: a `sleep` a cell started in a new session
does not outlive the grading.
"""

from __future__ import annotations

import contextlib
import os
import queue
import resource
import secrets
import shutil
import signal
import site
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

MARKER = "COURSE_GRADE_RUN"  # environment variable every process of one kernel inherits
START_TIMEOUT_S = 120
INTERRUPT_GRACE_S = 10  # how long an interrupted cell may take to stop
POLL_S = 0.5


@dataclass(frozen=True)
class Reply:
    """How one execute request ended: "ok", "error", "timeout" or "dead"."""

    status: str
    ename: str = ""
    evalue: str = ""
    stuck: bool = False  # a timeout the interrupt did not end


def _limit_address_space(limit: int) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _environment(root: Path, run_id: str) -> dict[str, str]:
    env = dict(os.environ)
    for name in ("home", "work", "tmp", "ipython"):
        (root / name).mkdir()
    env.update(HOME=str(root / "home"), TMPDIR=str(root / "tmp"),
               IPYTHONDIR=str(root / "ipython"), COURSE_FAST="1", **{MARKER: run_id})
    # Packages installed with `pip install --user` live under the real HOME: keep them.
    env.setdefault("PYTHONUSERBASE", site.getuserbase())
    env.pop("MPLBACKEND", None)  # the kernel picks its inline backend
    return env


def _processes() -> dict[int, int]:
    """pid -> parent pid of every process on this machine (Linux /proc; empty elsewhere)."""
    found = {}
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                with contextlib.suppress(OSError, ValueError, IndexError):
                    stat = Path(entry.path, "stat").read_text()
                    found[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    return found


def _marked(run_id: str, pids) -> set[int]:
    """The processes among `pids` whose environment carries this run's marker."""
    wanted = f"{MARKER}={run_id}".encode()
    marked = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            if wanted in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                marked.add(pid)
    return marked


def _descendants(root_pid: int, parents: dict[int, int]) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    found, todo = set(), [root_pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


class Kernel:
    """A started kernel: `execute` code in it, `close` it and everything it started."""

    def __init__(self, memory_limit: int | None = None):
        from jupyter_client import KernelManager

        self.root = Path(tempfile.mkdtemp(prefix="grade-"))
        self.run_id = secrets.token_hex(8)
        self.manager = KernelManager(kernel_name="python3", transport="ipc",
                                     ip=str(self.root / "ipc"))
        self.manager.connection_file = str(self.root / "connection.json")
        launch = {"env": _environment(self.root, self.run_id), "cwd": str(self.root / "work"),
                  "stdout": open(os.devnull, "wb"),  # noqa: SIM115 (closed in close())
                  "stderr": open(self.root / "kernel.log", "wb")}  # noqa: SIM115
        self._files = [launch["stdout"], launch["stderr"]]
        # Where the OS can set another process's limits (Linux), the limit is set on the
        # started kernel: a `preexec_fn` runs Python in a forked copy of this process, which
        # is unsafe once it has threads (JAX starts some, and warns at every fork).
        set_after = memory_limit is not None and hasattr(resource, "prlimit")
        if memory_limit is not None and not set_after:
            launch["preexec_fn"] = lambda: _limit_address_space(memory_limit)
        self.client = None
        try:
            self.manager.start_kernel(**launch)
            self.pid = self.manager.provisioner.pid
            if set_after:
                resource.prlimit(self.pid, resource.RLIMIT_AS, (memory_limit, memory_limit))
            self.client = self.manager.blocking_client()
            self.client.start_channels()
            self.client.wait_for_ready(timeout=START_TIMEOUT_S)
        except BaseException:
            self.close()
            raise

    @property
    def log(self) -> str:
        """The kernel's own stderr (what it printed when it died, for instance)."""
        with contextlib.suppress(OSError):
            return (self.root / "kernel.log").read_text(errors="replace")
        return ""

    def _drain_iopub(self) -> None:
        """Outputs are not kept: read them off so that they do not pile up."""
        with contextlib.suppress(queue.Empty):
            while True:
                self.client.get_iopub_msg(timeout=0)

    def execute(self, code: str, timeout: float, user_expressions: dict | None = None,
                ) -> Reply:
        """Run `code`; interrupt it after `timeout` seconds."""
        msg_id = self.client.execute(code, store_history=not user_expressions,
                                     user_expressions=user_expressions or {},
                                     allow_stdin=False, stop_on_error=False)
        deadline = time.monotonic() + timeout
        reply = self._reply(msg_id, deadline)
        if reply is not None:
            return reply
        if not self.manager.is_alive():
            return Reply("dead")
        self.manager.interrupt_kernel()
        late = self._reply(msg_id, time.monotonic() + INTERRUPT_GRACE_S)
        return Reply("timeout", stuck=late is None)

    def _reply(self, msg_id: str, deadline: float) -> Reply | None:
        while (left := deadline - time.monotonic()) > 0:
            try:
                message = self.client.get_shell_msg(timeout=min(left, POLL_S))
            except queue.Empty:
                self._drain_iopub()
                if not self.manager.is_alive():
                    return Reply("dead")
                continue
            if message["parent_header"].get("msg_id") == msg_id:
                self._drain_iopub()
                content = message["content"]
                return Reply(content.get("status", "error"), content.get("ename", ""),
                             content.get("evalue", ""))
        return None

    def close(self) -> None:
        """Stop the kernel and kill every process it started, then delete its folders."""
        parents = _processes()
        pid = getattr(self, "pid", None)
        strays = _marked(self.run_id, parents) | (_descendants(pid, parents) if pid else set())
        if self.client is not None:
            self.client.stop_channels()
        with contextlib.suppress(Exception):
            self.manager.shutdown_kernel(now=True)
        if pid:
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)  # the kernel leads its own session and group
        for stray in strays | _marked(self.run_id, _processes()):
            if stray != os.getpid():
                with contextlib.suppress(OSError):
                    os.kill(stray, signal.SIGKILL)
        for file in self._files if hasattr(self, "_files") else []:
            file.close()
        shutil.rmtree(self.root, ignore_errors=True)
