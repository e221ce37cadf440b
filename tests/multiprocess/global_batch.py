"""Data-parallel gradient over a global batch assembled from two local ones (for
test_device.py). Run with 2 processes and 2 devices per process.

Every process builds the same full data set, keeps its own rows as its local batch, and
turns that into the global batch; the jitted gradient then sees all rows.
"""

import json

from course_lib.launch import initialize_from_env

info = initialize_from_env()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.experimental import multihost_utils  # noqa: E402

from course_lib.device import (  # noqa: E402
    batch_sharding,
    data_parallel_mesh,
    make_global_batch,
    prefetch_to_device,
    replicated_sharding,
)

GLOBAL_BATCH, FEATURES = 8, 3
rng = np.random.default_rng(0)
inputs = rng.normal(size=(GLOBAL_BATCH, FEATURES)).astype(np.float32)
targets = rng.normal(size=(GLOBAL_BATCH,)).astype(np.float32)
weights = np.array([0.5, -1.0, 2.0], dtype=np.float32)

local_size = GLOBAL_BATCH // info.num_processes
rows = slice(info.process_id * local_size, (info.process_id + 1) * local_size)
local_batch = {"x": inputs[rows], "y": targets[rows]}

mesh = data_parallel_mesh()
global_batch = make_global_batch(local_batch, mesh)


def loss_fn(w, batch):
    return jnp.mean((batch["x"] @ w - batch["y"]) ** 2)


params = jax.device_put(weights, replicated_sharding(mesh))
grad = jax.jit(jax.grad(loss_fn), out_shardings=replicated_sharding(mesh))(params, global_batch)
gathered = multihost_utils.process_allgather(global_batch["x"], tiled=True)

# The same through the prefetcher: a sharding that spans both processes makes it build
# global batches.
with prefetch_to_device([local_batch, local_batch], sharding=batch_sharding(mesh)) as batches:
    prefetched_shapes = [list(batch["x"].shape) for batch in batches]

print("RESULT " + json.dumps({
    "device_count": jax.device_count(),
    "global_shape": list(global_batch["x"].shape),
    "local_shards": len(global_batch["x"].addressable_shards),
    "gathered_equals_full": bool(np.array_equal(np.asarray(gathered), inputs)),
    "grad": np.asarray(grad.addressable_data(0)).tolist(),
    "prefetched_shapes": prefetched_shapes,
}))
