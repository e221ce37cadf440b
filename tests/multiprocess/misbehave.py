"""A launched script that goes wrong on purpose (for test_launch.py), without JAX.

--fail-rank R: rank R raises once every other rank is running (and has written its pid and
  the pid of a child it started to --pid-dir, so the test can check that nothing survives).
--hang-rank R: rank R sleeps forever; the others exit at once.
"""

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

parser = argparse.ArgumentParser()
parser.add_argument("--fail-rank", type=int)
parser.add_argument("--hang-rank", type=int)
parser.add_argument("--pid-dir")
options = parser.parse_args()
rank = int(os.environ["FTB_PROCESS_ID"])
count = int(os.environ["FTB_NUM_PROCESSES"])
print(f"rank {rank} of {count} started", flush=True)

if options.hang_rank is not None:
    if rank == options.hang_rank:
        print("sleeping forever", flush=True)
        while True:
            time.sleep(1)
    sys.exit(0)

pid_dir = Path(options.pid_dir)
if rank == options.fail_rank:
    others = [pid_dir / f"rank{other}.ready" for other in range(count) if other != rank]
    deadline = time.monotonic() + 20
    while not all(path.exists() for path in others) and time.monotonic() < deadline:
        time.sleep(0.02)
    raise RuntimeError(f"rank {rank} fails on purpose")

child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
(pid_dir / f"rank{rank}.pids").write_text(f"{os.getpid()} {child.pid}")
(pid_dir / f"rank{rank}.ready").write_text("")
print("waiting for a peer that will never come", flush=True)
time.sleep(120)
