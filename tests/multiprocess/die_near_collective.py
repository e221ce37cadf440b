"""Rank 1 kills itself with SIGKILL before, during or after a collective (argv[1]); rank 0
goes on as a healthy process would. The launcher must name rank 1 and stop rank 0."""

import os
import signal
import sys
import time

from course_lib.launch import initialize_from_env

info = initialize_from_env()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from course_lib.device import data_parallel_mesh, make_global_batch, replicated_sharding  # noqa: E402

stage = sys.argv[1]
mesh = data_parallel_mesh()
global_sum = jax.jit(jnp.sum, out_shardings=replicated_sharding(mesh))


def collective() -> None:
    global_sum(make_global_batch(np.ones(2, np.float32), mesh)).block_until_ready()


def die() -> None:
    print(f"rank {info.process_id}: SIGKILL {stage} the collective", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


if info.process_id == 1 and stage == "before":
    die()
if stage == "during":
    collective()  # both ranks complete one collective...
    if info.process_id == 1:
        time.sleep(1.0)  # ...then rank 0 is inside the second one when rank 1 dies
        die()
collective()
print(f"rank {info.process_id}: collective done", flush=True)
if info.process_id == 1 and stage == "after":
    die()
time.sleep(2.0)  # rank 0 then waits for its peer at JAX's shutdown barrier
