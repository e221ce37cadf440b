"""Run one script as N cooperating JAX processes on this machine.

Real multi-host training starts one Python process per host; the processes find each other
through a coordinator (process 0's address) and then behave as one program over all their
devices. To practise that on a laptop we start N copies of a script on 127.0.0.1, each told
its rank through environment variables, and each calls `initialize_from_env()` first.

The launcher also watches the processes. A JAX process whose peer has died does not end
quickly: on CPU its next collective fails (Gloo's socket to the peer is reset), but at exit
it waits for the other processes to terminate, up to `shutdown_timeout_seconds` (300 s by
default), and a peer counts as dead only after `heartbeat_timeout_seconds` (100 s) without
a heartbeat (`jax.distributed.initialize`'s docstring, JAX 0.10.2). So as soon as one rank
fails, or the deadline passes, the launcher kills every other rank's whole process group
and tells you which rank failed and which were still running, with the end of each one's
output.
For a rank still running at the deadline it also shows where that rank was waiting: the
Python stack of its main thread, dumped just before it is killed. The watch goes both ways:
a rank that joined through `initialize_from_env` ends, with whatever it started, within a
second of its launcher being killed outright (a notebook kernel killed or restarted
mid-launch), instead of training on or waiting for a peer.

    python -m course_lib.launch -n 2 --devices-per-process 2 train.py --steps 10

or, from a notebook, `launch("train.py", num_processes=2)`.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import dataclasses
import faulthandler
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

from course_lib._checks import check_bool, check_int

# The environment variables a launched script reads (through `initialize_from_env`).
ENV_PROCESS_ID = "FTB_PROCESS_ID"
ENV_NUM_PROCESSES = "FTB_NUM_PROCESSES"
ENV_COORDINATOR = "FTB_COORDINATOR"
ENV_TIMEOUT = "FTB_TIMEOUT"
ENV_STACK_FILE = "FTB_STACK_FILE"
ENV_LAUNCHER_PID = "FTB_LAUNCHER_PID"

# A stuck rank is asked for its Python stacks with this signal before it is killed; the
# handler is installed by `initialize_from_env` (None where the platform has no SIGUSR1).
_DUMP_SIGNAL = getattr(signal, "SIGUSR1", None)
_DUMP_SECONDS = 1.0  # the longest the launcher waits for a stuck rank's stack dump
_MAIN_THREAD_HEADER = "main thread "

_POLL_SECONDS = 0.02
_ORPHAN_POLL_SECONDS = 0.5  # how often a rank checks that its launcher is still alive
_GRACE_SECONDS = 1.0  # between SIGTERM and SIGKILL when stopping a rank
_TAIL_LINES = 15
# Lines the runtime writes, not the script: Gloo's connection lines, and the glog/absl lines
# of JAX's C++ side ("W1201 10:11:28.830253   31948 preemption_notifier.cc:90] ...").
_RUNTIME_LOG = re.compile(r"^(\[Gloo\]|[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ \S+:\d+\]|"
                          r"WARNING: All log messages before absl::InitializeLog)")


def is_runtime_log(line: str) -> bool:
    """Whether `line` was written by JAX's runtime or Gloo rather than by the script."""
    return bool(_RUNTIME_LOG.match(line))


# -- the result ----------------------------------------------------------------------------
@dataclasses.dataclass
class RankResult:
    """What one rank did.

    `status` is "ok" (exit code 0), "failed" (non-zero exit on its own), "killed" (stopped
    by the launcher because another rank failed) or "stuck" (still running at the deadline).
    `stacks` is, for a stuck rank that called `initialize_from_env`, the Python stack of
    every thread at the deadline (most recent call first); "" otherwise.
    """

    rank: int
    status: str
    returncode: int | None
    output: str
    elapsed: float
    stacks: str = ""

    def tail(self, lines: int = _TAIL_LINES, *, logs: bool = False) -> str:
        """The last `lines` lines of this rank's output (stdout and stderr interleaved);
        the runtime's own log lines only with `logs=True`."""
        return "\n".join(self._lines(logs)[-lines:])

    def _lines(self, logs: bool) -> list[str]:
        lines = self.output.rstrip("\n").splitlines()
        return lines if logs else [line for line in lines if not is_runtime_log(line)]

    def hidden_log_lines(self) -> int:
        """How many of this rank's lines are the runtime's log (hidden by default)."""
        return len(self._lines(True)) - len(self._lines(False))

    @property
    def signal_name(self) -> str | None:
        """The signal that ended this rank from outside the launcher (e.g. "SIGKILL", as
        an out-of-memory kill sends), or None when it exited on its own or was stopped by
        the launcher."""
        if self.status != "failed" or self.returncode is None or self.returncode >= 0:
            return None
        try:
            return signal.Signals(-self.returncode).name
        except ValueError:
            return f"signal {-self.returncode}"

    @property
    def main_stack(self) -> str:
        """Where the main thread was at the deadline, most recent call first ("" if unknown)."""
        return _main_thread_stack(self.stacks)


@dataclasses.dataclass
class LaunchResult:
    """The outcome of a launch: one `RankResult` per rank plus the overall verdict."""

    script: str
    ranks: list[RankResult]
    elapsed: float
    timeout: float

    @property
    def ok(self) -> bool:
        return all(rank.status == "ok" for rank in self.ranks)

    @property
    def failed_ranks(self) -> list[int]:
        return [rank.rank for rank in self.ranks if rank.status == "failed"]

    @property
    def stuck_ranks(self) -> list[int]:
        return [rank.rank for rank in self.ranks if rank.status == "stuck"]

    @property
    def killed_ranks(self) -> list[int]:
        return [rank.rank for rank in self.ranks if rank.status == "killed"]

    @property
    def timed_out(self) -> bool:
        return bool(self.stuck_ranks)

    @property
    def returncodes(self) -> list[int | None]:
        return [rank.returncode for rank in self.ranks]

    @property
    def outputs(self) -> list[str]:
        return [rank.output for rank in self.ranks]

    def summary(self, logs: bool = False) -> str:
        """One line for the verdict, then the output tail of every rank that went wrong:
        what the script printed, and with `logs=True` the lines JAX's runtime and Gloo
        logged too (connections, the preemption notifier), which are hidden by default."""
        count = len(self.ranks)
        if self.ok:
            return f"{self.script}: all {count} processes finished in {self.elapsed:.1f} s."
        parts = []
        if self.failed_ranks:
            signals = [f"rank {rank.rank} was killed by {rank.signal_name}"
                       for rank in self.ranks if rank.signal_name]
            parts.append(f"rank(s) {self.failed_ranks} failed"
                         + (f" ({', '.join(signals)})" if signals else ""))
        if self.stuck_ranks:
            parts.append(f"rank(s) {self.stuck_ranks} were still running at the "
                         f"{self.timeout:g} s deadline (stuck)")
        if self.killed_ranks:
            parts.append(f"rank(s) {self.killed_ranks} were killed because a peer failed")
        lines = [f"{self.script}: " + "; ".join(parts) + f" after {self.elapsed:.1f} s."]
        for rank in self.ranks:
            if rank.status != "ok":
                lines.append(f"--- rank {rank.rank} ({rank.status}, "
                             f"returncode {rank.returncode}), last lines:")
                lines.append(rank.tail(logs=logs) or "(no output)")
            if rank.main_stack:
                lines.append(f"--- rank {rank.rank} was waiting here at the deadline "
                             "(main thread, most recent call first):")
                lines.append(rank.main_stack)
        hidden = 0 if logs else sum(rank.hidden_log_lines() for rank in self.ranks
                                    if rank.status != "ok")
        if hidden:
            lines.append(f"({hidden} line{'s' if hidden != 1 else ''} of JAX and Gloo log "
                         "hidden; summary(logs=True) shows them)")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()


class LaunchError(RuntimeError):
    """Raised by `launch(..., check=True)` when a rank failed or got stuck."""

    def __init__(self, result: LaunchResult):
        super().__init__(result.summary())
        self.result = result


# -- starting and stopping processes -------------------------------------------------------
def free_port() -> int:
    """A TCP port that is free on 127.0.0.1 right now (the OS picks it when we bind port 0).

    Another program could take it before process 0 binds it; on a laptop that is rare
    enough not to matter, and the launch would then fail loudly rather than hang.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _child_env(rank: int, num_processes: int, devices_per_process: int, coordinator: str,
               timeout: float, env: Mapping[str, str] | None,
               stack_file: Path) -> dict[str, str]:
    """The environment of one rank: ours, plus CPU defaults, the caller's overrides, and the
    rank's identity (which nothing may override)."""
    child = dict(os.environ)
    flags = [flag for flag in child.get("XLA_FLAGS", "").split()
             if not flag.startswith("--xla_force_host_platform_device_count")]
    flags.append(f"--xla_force_host_platform_device_count={devices_per_process}")
    child["XLA_FLAGS"] = " ".join(flags)
    child["JAX_PLATFORMS"] = "cpu"
    child["PYTHONUNBUFFERED"] = "1"  # so that a killed rank's last lines are not lost
    # Make `import course_lib` work even when it is not installed (e.g. a fresh Colab).
    package_root = str(Path(__file__).resolve().parent.parent)
    child["PYTHONPATH"] = os.pathsep.join(
        part for part in (package_root, child.get("PYTHONPATH", "")) if part)
    child.update(env or {})
    child[ENV_PROCESS_ID] = str(rank)
    child[ENV_NUM_PROCESSES] = str(num_processes)
    child[ENV_COORDINATOR] = coordinator
    child[ENV_TIMEOUT] = str(timeout)
    child[ENV_STACK_FILE] = str(stack_file)
    child[ENV_LAUNCHER_PID] = str(os.getpid())
    return child


def _read_lines(stream, lines: list[str], prefix: str | None) -> None:
    """Copy a rank's output into `lines` (and echo it with a rank prefix if asked)."""
    for line in iter(stream.readline, ""):
        lines.append(line)
        if prefix is not None:
            print(prefix + line, end="", flush=True)
    stream.close()


def _signal_group(process: subprocess.Popen, sig: int) -> None:
    # The group may already be empty (a rank that exited and started nothing).
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)


def _stop_groups(processes: Sequence[subprocess.Popen]) -> None:
    """Stop every rank's whole process group (the rank and anything it started): ask politely
    with SIGTERM, then SIGKILL whatever is left after a short grace period.

    All ranks are signalled together: stopping them one after another would let the later
    ones notice their dead peer and bury their own last lines under its error messages.
    (A JAX process usually ignores SIGTERM, which it takes as a preemption notice.)
    """
    for process in processes:
        _signal_group(process, signal.SIGTERM)
    deadline = time.monotonic() + _GRACE_SECONDS
    for process in processes:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
    for process in processes:
        _signal_group(process, signal.SIGKILL)
    for process in processes:
        process.wait()


def _dump_stacks(processes: Sequence[subprocess.Popen], stack_files: Sequence[Path],
                 ranks: Sequence[int]) -> list[str]:
    """Ask each of `ranks` for the Python stacks of all its threads; return them per rank.

    Only a rank whose stack file exists gets the signal: it installed the handler in
    `initialize_from_env`. A rank that did not would be killed by the signal instead.
    """
    asked = []
    for rank in ranks:
        if _DUMP_SIGNAL is not None and stack_files[rank].exists():
            with contextlib.suppress(ProcessLookupError):
                os.kill(processes[rank].pid, _DUMP_SIGNAL)
                asked.append(rank)
    # faulthandler writes from inside its signal handler, even while the main thread is
    # blocked in C++ (a collective, a barrier): the dumps appear within milliseconds.
    deadline = time.monotonic() + _DUMP_SECONDS
    stacks = ["" for _ in processes]
    for rank in asked:
        while time.monotonic() < deadline:
            stacks[rank] = _read_stacks(stack_files[rank])
            if stacks[rank]:
                break
            time.sleep(_POLL_SECONDS)
    if asked:
        time.sleep(_POLL_SECONDS)  # let a dump still being written finish
        for rank in asked:
            stacks[rank] = _read_stacks(stack_files[rank])
    return stacks


def _read_stacks(stack_file: Path) -> str:
    """The dump in `stack_file`: what follows the main-thread header line (or "")."""
    with contextlib.suppress(OSError):
        header, _, dump = stack_file.read_text(errors="replace").partition("\n")
        if header.startswith(_MAIN_THREAD_HEADER):
            return header + "\n" + dump if dump.strip() else ""
    return ""


def _main_thread_stack(stacks: str) -> str:
    """The main thread's frames in a faulthandler dump written after our header line."""
    header, _, dump = stacks.partition("\n")
    if not header.startswith(_MAIN_THREAD_HEADER):
        return ""
    thread_id = header.removeprefix(_MAIN_THREAD_HEADER).strip()
    frames: list[str] = []
    inside = False
    for line in dump.splitlines():
        if line.startswith(("Thread 0x", "Current thread 0x")):
            inside = thread_id in line
        elif inside and line.startswith("  "):
            frames.append(line)
        elif inside and frames:
            break
    return "\n".join(frames)


def _validate(script, num_processes, devices_per_process, timeout, args, env) -> Path:
    path = Path(script)
    if not path.is_file():
        raise FileNotFoundError(
            f"script={str(script)!r} is not a file. Pass the path of a Python script that "
            "calls course_lib.launch.initialize_from_env() before using JAX.")
    check_int("num_processes", num_processes, minimum=1,
              fix="Pass num_processes=2 to simulate two hosts.")
    check_int("devices_per_process", devices_per_process, minimum=1,
              fix="Pass devices_per_process=1 (or more to simulate several chips per host).")
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
        raise ValueError(
            f"timeout={timeout!r} must be a positive number of seconds. Pass e.g. "
            "timeout=60; a launch that runs longer is stopped and reported as stuck.")
    if isinstance(args, str) or not all(isinstance(arg, str) for arg in args):
        raise TypeError(
            f"args={args!r} must be a sequence of strings (the script's command line), "
            "e.g. args=('--steps', '10').")
    if env is not None and not all(
            isinstance(key, str) and isinstance(value, str) for key, value in env.items()):
        raise TypeError(f"env={env!r} must map strings to strings, e.g. {{'SEED': '0'}}.")
    return path


# -- the launcher --------------------------------------------------------------------------
def launch(script: str | os.PathLike, num_processes: int = 2, devices_per_process: int = 1,
           timeout: float = 60, args: Sequence[str] = (), env: Mapping[str, str] | None = None,
           *, check: bool = True, echo: bool = False) -> LaunchResult:
    """Run `script` as `num_processes` JAX processes and wait for all of them.

    Each rank sees `devices_per_process` simulated CPU devices, so the job has
    `num_processes * devices_per_process` devices in total. `env` overrides the defaults
    (`JAX_PLATFORMS=cpu`, the device-count flag). As soon as a rank exits with an error, or
    `timeout` seconds pass, every remaining rank is stopped. With `check=True` a failure
    raises `LaunchError` (its `.result` holds the details); `echo=True` prints every line as
    it arrives, prefixed with its rank.
    """
    path = _validate(script, num_processes, devices_per_process, timeout, args, env)
    check_bool("check", check)
    check_bool("echo", echo)
    coordinator = f"127.0.0.1:{free_port()}"
    start = time.monotonic()
    processes: list[subprocess.Popen] = []
    outputs: list[list[str]] = []
    readers: list[threading.Thread] = []
    with tempfile.TemporaryDirectory(prefix="ftb-launch-") as stack_dir:
        stack_files = [Path(stack_dir) / f"rank{rank}.stacks" for rank in range(num_processes)]
        try:
            for rank in range(num_processes):
                child_env = _child_env(rank, num_processes, devices_per_process, coordinator,
                                       timeout, env, stack_files[rank])
                process, lines, reader = _start_rank(rank, path, args, child_env, echo)
                processes.append(process)
                outputs.append(lines)
                readers.append(reader)
            status, finished_at = _watch(processes, start, timeout)
            stuck = [rank for rank, s in enumerate(status) if s == "stuck"]
            stacks = _dump_stacks(processes, stack_files, stuck)
        finally:
            _stop_groups(processes)  # also stops what ranks that exited cleanly left behind
            for reader in readers:
                reader.join(timeout=2)
    end = time.monotonic()
    ranks = [RankResult(rank=rank, status=status[rank],
                        returncode=processes[rank].returncode,
                        output="".join(outputs[rank]),
                        elapsed=(finished_at[rank] or end) - start,
                        stacks=stacks[rank])
             for rank in range(num_processes)]
    result = LaunchResult(script=str(script), ranks=ranks, elapsed=end - start,
                          timeout=float(timeout))
    if check and not result.ok:
        raise LaunchError(result)
    return result


def _start_rank(rank: int, path: Path, args: Sequence[str], env: dict[str, str],
                echo: bool) -> tuple[subprocess.Popen, list[str], threading.Thread]:
    """Start one rank in its own session (so its whole process group can be killed) and a
    thread that collects its output."""
    process = subprocess.Popen(
        [sys.executable, str(path), *args], env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        text=True, errors="replace", start_new_session=True)
    lines: list[str] = []
    reader = threading.Thread(
        target=_read_lines, args=(process.stdout, lines, f"[rank {rank}] " if echo else None),
        daemon=True, name=f"launch-rank-{rank}-output")
    reader.start()
    return process, lines, reader


def _watch(processes: list[subprocess.Popen], start: float,
           timeout: float) -> tuple[list[str], list[float | None]]:
    """Poll the ranks until all succeed, one fails, or the deadline passes; return each
    rank's status and the time it exited (None for ranks the launcher must still stop)."""
    status: list[str | None] = [None] * len(processes)
    finished_at: list[float | None] = [None] * len(processes)
    while True:
        now = time.monotonic()
        for rank, process in enumerate(processes):
            if status[rank] is None and process.poll() is not None:
                status[rank] = "ok" if process.returncode == 0 else "failed"
                finished_at[rank] = now
        if all(s is not None for s in status) or "failed" in status:
            return [s or "killed" for s in status], finished_at
        if now - start > timeout:
            return [s or "stuck" for s in status], finished_at
        time.sleep(_POLL_SECONDS)


# -- inside a launched script ---------------------------------------------------------------
class DistributedInfo(NamedTuple):
    process_id: int
    num_processes: int
    coordinator_address: str | None


def cluster_environment() -> str | None:
    """The cluster `jax.distributed.initialize()` would detect here on its own, by JAX's
    name for it ("slurm", "gke_tpu", "ompi", ...), or None.

    JAX keeps one class per scheduler in `jax._src.clusters`; each says from the environment
    whether the process runs under it (SLURM: `SLURM_JOB_ID`, `SLURM_STEP_NODELIST`,
    `SLURM_NTASKS`, `SLURM_PROCID` and `SLURM_LOCALID` all set). We ask them in JAX's own
    order and skip the opt-in ones (mpi4py), exactly as `initialize()` does with no
    arguments. The module is private, so a JAX without it means "no cluster found". JAX
    0.10.2 knows Open MPI only by `OMPI_MCA_orte_hnp_uri`, which `mpirun` sets up to Open MPI
    4; Open MPI 5's launcher does not, so its copies are caught by `copies_started_elsewhere`.
    """
    try:
        from jax._src.clusters import ClusterEnv
    except ImportError:
        return None
    for environment in getattr(ClusterEnv, "_cluster_types", []):
        if not getattr(environment, "opt_in_only_method", False) and \
                environment.is_env_present():
            return environment.name
    return None


# Variables that say "one of N copies" for launchers JAX does not detect: MPICH's and Intel
# MPI's Hydra (PMI_SIZE), PMIx-based launchers (PMIX_SIZE is not set by all; PMI_SIZE is),
# Open MPI outside JAX's detection (OMPI_COMM_WORLD_SIZE), and a SLURM allocation whose
# tasks were not started by srun (SLURM_NTASKS without SLURM_PROCID, e.g. after salloc).
_COPY_COUNTS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS")


def copies_started_elsewhere(environ: Mapping[str, str] | None = None) -> str | None:
    """Why this process looks like one of several copies started by a launcher that JAX
    does not detect (a sentence), or None. Such copies, each alone as rank 0 of 1, would
    all train into the same output folder."""
    environ = os.environ if environ is None else environ
    for name in _COPY_COUNTS:
        value = environ.get(name, "")
        if value.isdigit() and int(value) > 1:
            if name == "SLURM_NTASKS" and "SLURM_PROCID" not in environ:
                return (f"SLURM_NTASKS={value} is set without SLURM_PROCID: this is a SLURM "
                        "allocation, but the process was not started by srun")
            return f"{name}={value} says a launcher started {value} copies"
    return None


def initialize_from_env(*, required: bool = True) -> DistributedInfo:
    """Join the JAX job this process was started into; call it before any other JAX call.

    Three ways in, tried in order:

    1. started by `launch` (the `FTB_*` variables are set): pass their rank, process count
       and coordinator to `jax.distributed.initialize`, and let the launcher ask this
       process where it is stuck (its stacks);
    2. started by a scheduler that JAX recognises (`srun` on SLURM, a Cloud TPU pod, Open
       MPI's `mpirun`, ...; see `cluster_environment`): call `jax.distributed.initialize()`
       with no arguments, so that JAX reads the rank, count and coordinator itself;
    3. neither: `required=True` raises (so a forgotten launcher does not silently train on
       one process alone); `required=False` returns a single-process description, unless
       the environment says that a launcher JAX does not detect started several copies
       (`copies_started_elsewhere`): then it raises too, before anything is written.
    """
    check_bool("required", required)
    if ENV_NUM_PROCESSES not in os.environ:
        cluster = cluster_environment()
        if cluster is not None:
            return _join_cluster(cluster)
        copies = copies_started_elsewhere()
        if required or copies:
            raise RuntimeError(
                f"{ENV_NUM_PROCESSES} is not set and no cluster that JAX detects (SLURM, "
                "Cloud TPU, Kubernetes, Open MPI) was found, so this script was started by "
                "neither the course's launcher nor a scheduler JAX knows"
                + (f"; yet {copies}, so every copy would run alone as rank 0 of 1 and "
                   "they would overwrite each other's output" if copies else "")
                + ". Run it with `python -m course_lib.launch -n 2 script.py` or under "
                "your scheduler (e.g. `srun python script.py` inside a SLURM allocation)"
                + ("" if copies else ", or call initialize_from_env(required=False) to "
                   "allow a single-process run") + ".")
        return DistributedInfo(process_id=0, num_processes=1, coordinator_address=None)
    num_processes = _int_from_env(ENV_NUM_PROCESSES, minimum=1)
    process_id = _int_from_env(ENV_PROCESS_ID, minimum=0)
    coordinator = os.environ.get(ENV_COORDINATOR, "")
    if process_id >= num_processes or not coordinator:
        raise RuntimeError(
            f"Inconsistent launch environment: {ENV_PROCESS_ID}={process_id}, "
            f"{ENV_NUM_PROCESSES}={num_processes}, {ENV_COORDINATOR}={coordinator!r}. The id "
            "must be below the count and the coordinator must be host:port; start the "
            "script through course_lib.launch instead of setting these by hand.")
    _enable_stack_dump()
    _exit_with_launcher()
    import jax

    # Gloo carries cross-process collectives on CPU (JAX's default in recent versions;
    # set explicitly so older versions agree).
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    timeout = float(os.environ.get(ENV_TIMEOUT, "300"))
    jax.distributed.initialize(
        coordinator_address=coordinator, num_processes=num_processes, process_id=process_id,
        initialization_timeout=max(1, int(timeout) + 1))
    return DistributedInfo(process_id, num_processes, coordinator)


def _join_cluster(cluster: str) -> DistributedInfo:
    """Let `jax.distributed.initialize()` read the job from the scheduler's environment."""
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize()
    from jax._src import distributed  # where initialize() keeps the address it used

    coordinator = getattr(distributed.global_state, "coordinator_address", None)
    return DistributedInfo(jax.process_index(), jax.process_count(), coordinator)


_stack_file = None  # kept open for faulthandler, which writes to it from a signal handler


def _enable_stack_dump() -> None:
    """On the launcher's signal, write every thread's Python stack to the launcher's file.

    The file starts with the main thread's id, so the launcher can pick that thread out.
    """
    global _stack_file
    path = os.environ.get(ENV_STACK_FILE)
    if _DUMP_SIGNAL is None or not path or _stack_file is not None:
        return
    _stack_file = open(path, "w")  # noqa: SIM115 (must stay open for the signal handler)
    # faulthandler writes thread ids as 0x followed by as many hex digits as a C long has.
    digits = 2 * ctypes.sizeof(ctypes.c_ulong)
    _stack_file.write(f"{_MAIN_THREAD_HEADER}0x{threading.main_thread().ident:0{digits}x}\n")
    _stack_file.flush()
    faulthandler.register(_DUMP_SIGNAL, file=_stack_file, all_threads=True)


# A small process in each rank's process group that outlives the rank: when the rank is
# gone (its parent changes), it kills the group, so that what the rank started cannot
# outlive it even when the rank dies before its own watch fires.
_SENTINEL = """
import os, signal, sys, time
rank, poll = int(sys.argv[1]), float(sys.argv[2])
while os.getppid() == rank:
    time.sleep(poll)
os.killpg(os.getpgrp(), signal.SIGKILL)
"""
_sentinel = None  # kept referenced: it runs as long as the rank does


def _exit_with_launcher() -> None:
    """End this rank, and everything it started, when the launcher that started it dies.

    The launcher stops its ranks itself when it ends normally, on an error or on Ctrl-C.
    A launcher killed outright (a notebook kernel restarted or killed) cannot: its ranks
    would train on, or sit in a collective waiting for a peer, for minutes. Each rank is
    its launcher's child, so when the launcher is gone its parent process changes; a
    daemon thread checks that twice a second and then kills the rank's own process group
    (the rank is the leader of its session, so its workers go with it). A rank may also
    die on its own first (JAX aborts a process whose coordinator is gone): a sentinel
    process in the same group, watching the rank the same way, then kills what is left.
    """
    global _sentinel
    raw = os.environ.get(ENV_LAUNCHER_PID, "")
    if not raw.isdigit() or os.getppid() != int(raw):
        return  # not a child of the launcher that set the variable: nothing to watch
    launcher = int(raw)
    _sentinel = subprocess.Popen(  # no preexec_fn: nothing runs in a forked copy of us
        [sys.executable, "-c", _SENTINEL, str(os.getpid()), str(_ORPHAN_POLL_SECONDS)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def watch() -> None:
        while os.getppid() == launcher:
            time.sleep(_ORPHAN_POLL_SECONDS)
        os.killpg(os.getpgrp(), signal.SIGKILL)

    threading.Thread(target=watch, daemon=True, name="launch-orphan-watch").start()


def _int_from_env(name: str, *, minimum: int) -> int:
    raw = os.environ.get(name, "")
    try:
        value = int(raw)
    except ValueError:
        value = None
    if value is None or value < minimum:
        raise RuntimeError(
            f"{name}={raw!r} must be an integer >= {minimum}. It is set by "
            "course_lib.launch; start the script through the launcher.")
    return value


# -- command line --------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    """`python -m course_lib.launch -n 2 script.py [args...]`; exit code 0 when every rank
    succeeded, 124 when a rank was stuck at the deadline, 1 when a rank failed."""
    parser = argparse.ArgumentParser(
        prog="python -m course_lib.launch",
        description="Run a script as N JAX processes on this machine (CPU devices).")
    parser.add_argument("-n", "--num-processes", type=int, default=2,
                        help="how many JAX processes to start (default 2)")
    parser.add_argument("--devices-per-process", type=int, default=1,
                        help="simulated CPU devices in each process (default 1)")
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="seconds before remaining ranks are killed (default 600)")
    parser.add_argument("script", help="a Python script that calls initialize_from_env()")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="passed on to the script")
    options = parser.parse_args(argv)
    try:
        result = launch(options.script, num_processes=options.num_processes,
                        devices_per_process=options.devices_per_process,
                        timeout=options.timeout, args=options.args, check=False, echo=True)
    except (ValueError, TypeError, FileNotFoundError) as error:
        parser.error(str(error))
    print(result.summary(), file=sys.stderr if not result.ok else sys.stdout)
    if result.ok:
        return 0
    return 124 if result.timed_out and not result.failed_ranks else 1


if __name__ == "__main__":
    sys.exit(main())
