"""Train the digits MLP for a few steps, optionally saving or restoring a checkpoint.

Usage: train_and_resume.py CHECKPOINT_DIR TOTAL_STEPS (run | save-at K | resume)
                           [--worker-count N] [--prefetch]
Prints one JSON line per step: {"step", "loss", "batch_sum"}. With --prefetch the loop draws
from prefetch_to_device(iter(loader)) and, before saving, waits until its thread has read
ahead; it then prints {"loader_next_index": ...}, how far the loader itself has read.
"""

import argparse
import json
import time

import numpy as np

import course_lib as grain
from course_lib.checkpoint import checkpoint_manager, restore_training, save_training
from course_lib.training import create_model, train_step


def make_iterator(worker_count: int):
    digits = grain.load_digits()
    loader = grain.load(
        grain.ArrayDataSource(digits), shuffle=True, seed=3, num_epochs=None,
        transformations=[grain.Normalize(), grain.RandomHorizontalFlip(p=0.5)],
        batch_size=32, drop_remainder=True, worker_count=worker_count)
    return iter(loader)


def wait_for_read_ahead(iterator) -> None:
    """Let the prefetch thread fill its buffer, so the loader stands ahead of the loop."""
    deadline = time.monotonic() + 30
    while not iterator._buffer.full() and time.monotonic() < deadline:
        time.sleep(0.01)


def main(arguments: argparse.Namespace) -> None:
    model, optimizer = create_model(64, seed=0)
    loader_iterator = make_iterator(arguments.worker_count)
    iterator = grain.prefetch_to_device(loader_iterator) if arguments.prefetch else loader_iterator
    manager = checkpoint_manager(arguments.directory)
    first_step = 0
    if arguments.mode == "resume":
        first_step = restore_training(manager, model, optimizer, iterator)
    for step in range(first_step, arguments.total_steps):
        batch = next(iterator)
        loss = train_step(model, optimizer, batch["image"], batch["label"])
        print(json.dumps({"step": step, "loss": float(loss),
                          "batch_sum": float(np.sum(np.asarray(batch["image"])))}), flush=True)
        if arguments.mode == "save-at" and step + 1 == arguments.save_at:
            if arguments.prefetch:
                wait_for_read_ahead(iterator)
                loader_state = json.loads(loader_iterator.get_state())
                print(json.dumps({"loader_next_index": loader_state["next_index"]}))
            save_training(manager, step + 1, model, optimizer, iterator)
            break
    if iterator is not loader_iterator:
        iterator.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("directory")
    parser.add_argument("total_steps", type=int)
    parser.add_argument("mode", choices=["run", "save-at", "resume"])
    parser.add_argument("save_at", type=int, nargs="?")
    parser.add_argument("--worker-count", type=int, default=0)
    parser.add_argument("--prefetch", action="store_true")
    main(parser.parse_args())
