"""Settings for the whole test run, notebooks included.

Notebooks run in fast mode under the test suite (small data, few repetitions); a learner's
own run of a notebook is full size unless they set COURSE_FAST=1 themselves.
"""

import os
from pathlib import Path

os.environ.setdefault("COURSE_FAST", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
# Every notebook kernel builds the same small models; a persistent compilation cache lets the
# later kernels skip the compilations the first one paid for.
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR",
                      str(Path(__file__).resolve().parent / ".jax_cache"))


def pytest_configure(config):
    """nbval stops each notebook's kernel with a kill (`shutdown_kernel(now=True)`), which
    takes the kernel's whole process group with it: the multiprocessing resource tracker too,
    so named semaphores and shared-memory segments that a library's worker pool still held
    (Grain's `mp_prefetch`, lesson 11) stayed in /dev/shm after every run. Here the kernel is
    asked to shut down, as JupyterLab's "Shut Down Kernel" does: its exit handlers run and
    release what it holds (jupyter_client still kills it after `shutdown_wait_time`)."""
    try:
        from nbval.kernel import RunningKernel
    except ImportError:  # nbval not installed: no notebook runs
        return

    def stop(self):
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=False)
        del self.km

    RunningKernel.stop = stop
