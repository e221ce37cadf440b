"""Saving the data position next to the model, with Orbax.

A resumed run must neither repeat nor skip a batch, so the loader's position belongs in the
same checkpoint as the weights and the optimizer state. Orbax saves a checkpoint as named
items, each written by a *handler*. `IteratorHandler` is the handler for a loader iterator:
every JAX process writes its own small JSON file (`process_0-of-2.json`, ...), because every
process reads a different shard and so stands at its own position.

The state is plain JSON, so `iterator.get_state()` / `set_state()` also work without Orbax.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import jax
import orbax.checkpoint as ocp
from flax import nnx


def _state_file(directory) -> Path:
    return Path(directory) / f"process_{jax.process_index()}-of-{jax.process_count()}.json"


class IteratorHandler(ocp.CheckpointHandler):
    """Writes and reads one loader iterator's state per JAX process."""

    def save(self, directory, args: IteratorSave) -> None:
        state = json.loads(args.iterator.get_state())
        _state_file(directory).write_text(json.dumps(state, indent=2, sort_keys=True))

    def restore(self, directory, args: IteratorRestore):
        path = _state_file(directory)
        if not path.exists():
            raise FileNotFoundError(
                f"{path} is missing: this checkpoint was saved by a different number of JAX "
                f"processes than the {jax.process_count()} running now.")
        args.iterator.set_state(path.read_text())
        return args.iterator


@ocp.args.register_with_handler(IteratorHandler, for_save=True)
@dataclasses.dataclass
class IteratorSave(ocp.args.CheckpointArgs):
    iterator: Any


@ocp.args.register_with_handler(IteratorHandler, for_restore=True)
@dataclasses.dataclass
class IteratorRestore(ocp.args.CheckpointArgs):
    iterator: Any


def checkpoint_manager(directory, *, max_to_keep: int | None = 3) -> ocp.CheckpointManager:
    """A CheckpointManager for `directory` (created if missing; must be an absolute path)."""
    directory = Path(directory).absolute()
    options = ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True)
    return ocp.CheckpointManager(directory, options=options)


def save_training(manager: ocp.CheckpointManager, step: int, model: nnx.Module,
                  optimizer: nnx.Optimizer, iterator) -> None:
    """Save model, optimizer state and data position together as checkpoint `step`."""
    manager.save(step, args=ocp.args.Composite(
        model=ocp.args.StandardSave(nnx.state(model)),
        optimizer=ocp.args.StandardSave(nnx.state(optimizer)),
        data=IteratorSave(iterator),
    ))
    manager.wait_until_finished()


def restore_training(manager: ocp.CheckpointManager, model: nnx.Module,
                     optimizer: nnx.Optimizer, iterator, step: int | None = None) -> int:
    """Restore checkpoint `step` (default: the latest) into the given objects, in place.

    `model` and `optimizer` must be freshly built with the same shapes; `iterator` is a new
    iterator of an equal loader. Returns the step that was restored.
    """
    step = manager.latest_step() if step is None else step
    if step is None:
        raise FileNotFoundError(f"no checkpoint in {manager.directory}: nothing to restore.")
    restored = manager.restore(step, args=ocp.args.Composite(
        model=ocp.args.StandardRestore(nnx.state(model)),
        optimizer=ocp.args.StandardRestore(nnx.state(optimizer)),
        data=IteratorRestore(iterator),
    ))
    nnx.update(model, restored["model"])
    nnx.update(optimizer, restored["optimizer"])
    return step
