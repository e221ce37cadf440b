"""Saving the data position next to the model, with Orbax.

A resumed run must neither repeat nor skip a batch, so the loader's position belongs in the
same checkpoint as the weights and the optimizer state. Orbax saves a checkpoint as named
items, each written by a *handler*. `IteratorHandler` is the handler for a loader iterator:
every JAX process writes its own small JSON file (`process_0-of-2.json`, ...), because every
process reads a different shard and so stands at its own position.

The iterator to save is the one the training loop draws from. With device prefetching that
is the `prefetch_to_device` iterator, not the loader iterator under it: the loader has read
a few batches ahead, and saving its position would skip them on resume. The prefetch
iterator reports the position of the last batch it handed out.

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

    def save(self, directory, args: IteratorSave | CheckpointSave) -> None:
        state = _iterator_in(args).get_state()
        if isinstance(state, str | bytes):  # a DataLoaderIterator's state is JSON already
            state = json.loads(state)
        _state_file(directory).write_text(json.dumps(state, indent=2, sort_keys=True))

    def restore(self, directory, args: IteratorRestore | CheckpointRestore):
        iterator = _iterator_in(args)
        path = _state_file(directory)
        if not path.exists():
            raise FileNotFoundError(
                f"{path} is missing: this checkpoint was saved by a different number of JAX "
                f"processes than the {jax.process_count()} running now.")
        text = path.read_text()
        # A DataLoaderIterator takes its state as JSON text, a DatasetIterator as a dict (as
        # in Grain): give each what its own get_state() returns.
        as_text = isinstance(iterator.get_state(), str | bytes)
        iterator.set_state(text if as_text else json.loads(text))
        return iterator


@ocp.args.register_with_handler(IteratorHandler, for_save=True)
@dataclasses.dataclass
class IteratorSave(ocp.args.CheckpointArgs):
    iterator: Any


@ocp.args.register_with_handler(IteratorHandler, for_restore=True)
@dataclasses.dataclass
class IteratorRestore(ocp.args.CheckpointArgs):
    iterator: Any


# Grain's names (`grain.checkpoint`, and `grain.python.PyGrainCheckpoint*`): the same handler,
# with the iterator in a field named `item`, so `ocp.args.Composite(ds=CheckpointSave(it))`
# written for Grain runs unchanged. Orbax ties one pair of argument classes to a handler
# class, hence the subclass.
class CheckpointHandler(IteratorHandler):
    """`IteratorHandler` for Grain's argument names, `CheckpointSave(item)` and
    `CheckpointRestore(item)` (Grain's `grain.checkpoint.CheckpointHandler`)."""


@ocp.args.register_with_handler(CheckpointHandler, for_save=True)
@dataclasses.dataclass
class CheckpointSave(ocp.args.CheckpointArgs):
    """Save `item`, a loader or Dataset iterator, with `IteratorHandler` (Grain's
    `grain.checkpoint.CheckpointSave`, also `PyGrainCheckpointSave`)."""

    item: Any


@ocp.args.register_with_handler(CheckpointHandler, for_restore=True)
@dataclasses.dataclass
class CheckpointRestore(ocp.args.CheckpointArgs):
    """Restore the saved position into `item`, an iterator of the same pipeline (Grain's
    `grain.checkpoint.CheckpointRestore`, also `PyGrainCheckpointRestore`)."""

    item: Any


def _iterator_in(args) -> Any:
    return args.item if isinstance(args, CheckpointSave | CheckpointRestore) else args.iterator


def checkpoint_manager(directory, *, max_to_keep: int | None = 3) -> ocp.CheckpointManager:
    """A CheckpointManager for `directory` (created if missing) that keeps the last
    `max_to_keep` steps (None keeps every one). Orbax 0.12.8 deprecates its own
    `max_to_keep` option, so the count goes in as `preservation_policy=LatestN(...)`."""
    directory = Path(directory).absolute()
    policy = ocp.checkpoint_managers.LatestN(max_to_keep)
    options = ocp.CheckpointManagerOptions(preservation_policy=policy, create=True)
    return ocp.CheckpointManager(directory, options=options)


def _check_iterator(iterator: Any) -> None:
    missing = [name for name in ("get_state", "set_state")
               if not callable(getattr(iterator, name, None))]
    if missing:
        raise TypeError(
            f"iterator={iterator!r} has no {'() or '.join(missing)}(), so its position "
            "cannot be saved or restored. Pass the iterator the training loop draws from: "
            "iter(loader), or prefetch_to_device(iter(loader)) when batches are prefetched.")


def save_training(manager: ocp.CheckpointManager, step: int, model: nnx.Module,
                  optimizer: nnx.Optimizer, iterator) -> None:
    """Save model, optimizer state and data position together as checkpoint `step`.

    `iterator` is what the loop draws from: a loader iterator or a prefetch iterator.
    """
    _check_iterator(iterator)
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
    iterator of an equal loader, or a prefetch iterator over one. Returns the restored step.
    """
    _check_iterator(iterator)
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


# `grain.python`'s older names for the same three.
PyGrainCheckpointHandler = CheckpointHandler
PyGrainCheckpointSave = CheckpointSave
PyGrainCheckpointRestore = CheckpointRestore
