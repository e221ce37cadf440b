"""Started twice with a SLURM step's environment and no course launcher: joins the job
through initialize_from_env's cluster path, builds one global batch, prints what it saw."""

import json

from course_lib.launch import cluster_environment, initialize_from_env

found = cluster_environment()
info = initialize_from_env()

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.experimental import multihost_utils  # noqa: E402

from course_lib.device import data_parallel_mesh, make_global_batch  # noqa: E402

local = np.arange(4, dtype=np.int32) + 100 * info.process_id
batch = make_global_batch(local, data_parallel_mesh())
rows = np.asarray(multihost_utils.process_allgather(batch, tiled=True)).tolist()
print("RESULT " + json.dumps({"cluster": found, "info": list(info),
                              "process_index": jax.process_index(),
                              "process_count": jax.process_count(),
                              "global_shape": list(batch.shape), "rows": rows}), flush=True)
