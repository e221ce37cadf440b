"""Train the digits MLP for a few steps, optionally saving or restoring a checkpoint.

Usage: train_and_resume.py CHECKPOINT_DIR TOTAL_STEPS (run | save-at K | resume)
Prints one JSON line per step: {"step", "loss", "batch_sum"}.
"""

import json
import sys

import numpy as np

import course_lib as grain
from course_lib.checkpoint import checkpoint_manager, restore_training, save_training
from course_lib.training import create_model, train_step


def make_iterator():
    digits = grain.load_digits()
    loader = grain.load(
        grain.ArrayDataSource(digits), shuffle=True, seed=3, num_epochs=None,
        transformations=[grain.Normalize(), grain.RandomHorizontalFlip(p=0.5)],
        batch_size=32, drop_remainder=True)
    return iter(loader)


def main(directory: str, total_steps: int, mode: str, save_at: int | None = None) -> None:
    model, optimizer = create_model(64, seed=0)
    iterator = make_iterator()
    manager = checkpoint_manager(directory)
    first_step = 0
    if mode == "resume":
        first_step = restore_training(manager, model, optimizer, iterator)
    for step in range(first_step, total_steps):
        batch = next(iterator)
        loss = train_step(model, optimizer, batch["image"], batch["label"])
        print(json.dumps({"step": step, "loss": float(loss),
                          "batch_sum": float(np.sum(batch["image"]))}), flush=True)
        if mode == "save-at" and step + 1 == save_at:
            save_training(manager, step + 1, model, optimizer, iterator)
            return


if __name__ == "__main__":
    args = sys.argv[1:]
    main(args[0], int(args[1]), args[2], int(args[3]) if len(args) > 3 else None)
