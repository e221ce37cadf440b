"""Joins the launched JAX job and reports what this process sees (for test_launch.py)."""

import json

from course_lib.launch import initialize_from_env

info = initialize_from_env()

import jax  # noqa: E402 - after initialize_from_env, as a launched script must

print("RESULT " + json.dumps({
    "rank": info.process_id,
    "process_index": jax.process_index(),
    "process_count": jax.process_count(),
    "local_device_count": jax.local_device_count(),
    "device_count": jax.device_count(),
}))
