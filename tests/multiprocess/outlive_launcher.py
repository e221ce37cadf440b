"""A launched rank that would outlive its launcher (for test_launch.py): it joins the JAX job,
starts a child, writes both pids to --pid-dir, then sleeps for two minutes."""

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from course_lib.launch import initialize_from_env

parser = argparse.ArgumentParser()
parser.add_argument("--pid-dir", required=True)
options = parser.parse_args()
initialize_from_env()
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
rank = os.environ["FTB_PROCESS_ID"]
path = Path(options.pid_dir) / f"rank{rank}.pids"
path.with_suffix(".tmp").write_text(f"{os.getpid()} {child.pid}")
path.with_suffix(".tmp").rename(path)  # the test never reads half a file
time.sleep(120)
