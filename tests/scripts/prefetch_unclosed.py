"""Take one batch through `prefetch_to_device` and end the script without `close()`.

Usage: prefetch_unclosed.py WORKER_COUNT

The background thread is still reading and copying the next batches when the interpreter
shuts down. A clean exit means status 0 and nothing on stderr; before the exit hook of
course_lib.device, this aborted with "terminate called after throwing an instance of ''".
Run by tests/test_prefetch_exit.py.
"""

import sys

import numpy as np

import course_lib as grain

worker_count = int(sys.argv[1])
images = np.arange(4096 * 256, dtype=np.float32).reshape(4096, 256)
loader = grain.load(grain.ArrayDataSource(images), num_epochs=None, shuffle=True, seed=0,
                    batch_size=512, worker_count=worker_count)
batches = grain.prefetch_to_device(iter(loader), size=2)
batch = next(batches)
print(batch.shape, flush=True)
