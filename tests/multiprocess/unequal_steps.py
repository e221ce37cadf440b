"""Data-parallel steps over each process's shard, one collective per step (for
test_unequal_shards.py).

Usage: unequal_steps.py NUM_RECORDS BATCH_SIZE SHARD_DROP_REMAINDER(0|1)

Every process loads its shard (`ShardByJaxProcess`) in batches of BATCH_SIZE (incomplete
batches dropped), turns each local batch into the global batch and sums it with a jitted
function: a cross-process collective, as the gradient all-reduce of a real training step.
If one process has more steps than its peer, its extra step waits for a peer that never
comes.
"""

import json
import sys

from course_lib.launch import initialize_from_env

info = initialize_from_env()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import course_lib as grain  # noqa: E402
from course_lib.device import (  # noqa: E402
    data_parallel_mesh,
    make_global_batch,
    replicated_sharding,
)

num_records, batch_size, drop_remainder = (int(arg) for arg in sys.argv[1:4])
shard_options = grain.ShardByJaxProcess(drop_remainder=bool(drop_remainder))
source = grain.ArrayDataSource(np.arange(num_records, dtype=np.int32))
loader = grain.load(source, num_epochs=1, shard_options=shard_options,
                    batch_size=batch_size, drop_remainder=True)

mesh = data_parallel_mesh()
global_sum = jax.jit(jnp.sum, out_shardings=replicated_sharding(mesh))

sums = []
for step, local_batch in enumerate(loader):
    print(f"rank {info.process_id}: step {step} waits for the collective", flush=True)
    total = global_sum(make_global_batch(local_batch, mesh))
    sums.append(int(np.asarray(total.addressable_data(0))))
    print(f"rank {info.process_id}: step {step} done", flush=True)

print(f"rank {info.process_id}: finished {len(sums)} steps", flush=True)
print("RESULT " + json.dumps({"steps": len(sums), "sums": sums}), flush=True)
