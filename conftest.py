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
