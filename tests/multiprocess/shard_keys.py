"""Each JAX process reads its shard's record keys for one epoch (for test_launch.py).

Usage: shard_keys.py NUM_RECORDS BATCH_SIZE DROP_REMAINDER(0|1)
"""

import json
import sys

from course_lib.launch import initialize_from_env

initialize_from_env()

import numpy as np  # noqa: E402
from jax.experimental import multihost_utils  # noqa: E402

from course_lib.sampler import IndexSampler  # noqa: E402
from course_lib.sharding import ShardByJaxProcess  # noqa: E402

num_records, batch_size, drop_remainder = (int(arg) for arg in sys.argv[1:4])
shard_options = ShardByJaxProcess(drop_remainder=bool(drop_remainder))
sampler = IndexSampler(num_records, shard_options=shard_options, shuffle=True,
                       num_epochs=1, seed=0)
keys = sampler.record_keys(0, sampler.total_length)
num_steps = len(keys) // batch_size  # what Batch(batch_size, drop_remainder=True) yields
# Every process learns every process's step count, as a real job would need to.
all_steps = multihost_utils.process_allgather(np.array(num_steps))
print("RESULT " + json.dumps({
    "shard_index": shard_options.shard_index,
    "shard_count": shard_options.shard_count,
    "keys": keys.tolist(),
    "num_steps": num_steps,
    "all_steps": np.asarray(all_steps).tolist(),
}))
