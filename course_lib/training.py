"""The model, optimizer and jitted step the lessons feed: a Flax NNX MLP trained with Optax.

Nothing here is about data loading; it is the "earlier weeks" code that the loader feeds, kept
in one place so that lessons, benchmarks and tests train the same thing.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from flax import nnx


class MLP(nnx.Module):
    """Flattens an image and classifies it with two hidden layers."""

    def __init__(self, in_features: int, num_classes: int = 10, hidden: int = 128, *,
                 rngs: nnx.Rngs):
        self.layer1 = nnx.Linear(in_features, hidden, rngs=rngs)
        self.layer2 = nnx.Linear(hidden, hidden, rngs=rngs)
        self.head = nnx.Linear(hidden, num_classes, rngs=rngs)

    def __call__(self, images: jax.Array) -> jax.Array:
        x = images.reshape(images.shape[0], -1)
        x = nnx.relu(self.layer1(x))
        x = nnx.relu(self.layer2(x))
        return self.head(x)


def create_model(in_features: int, *, seed: int = 0, learning_rate: float = 1e-3,
                 hidden: int = 128) -> tuple[MLP, nnx.Optimizer]:
    """A fresh MLP and its Adam optimizer, both determined by `seed`."""
    model = MLP(in_features, hidden=hidden, rngs=nnx.Rngs(seed))
    optimizer = nnx.Optimizer(model, optax.adam(learning_rate), wrt=nnx.Param)
    return model, optimizer


def loss_fn(model: MLP, images: jax.Array, labels: jax.Array) -> jax.Array:
    logits = model(images)
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


def update(model: MLP, optimizer: nnx.Optimizer, images: jax.Array,
           labels: jax.Array) -> jax.Array:
    """One step of gradient descent, not yet jitted; returns the loss before the update.

    Kept apart from `train_step` so that a lesson can wrap it before jitting, e.g. with
    `chex.assert_max_traces` to count how often it is traced."""
    loss, grads = nnx.value_and_grad(loss_fn)(model, images, labels)
    optimizer.update(model, grads)
    return loss


train_step = nnx.jit(update)


def correct_predictions(model: MLP, images: jax.Array, labels: jax.Array,
                        mask: jax.Array | None = None) -> jax.Array:
    """How many rows the model classifies correctly, counting only rows where `mask` is
    True (the real records of a padded batch)."""
    hits = jnp.argmax(model(images), axis=-1) == labels
    if mask is not None:
        hits = hits & mask
    return hits.sum()


count_correct = nnx.jit(correct_predictions)


@nnx.jit
def accuracy(model: MLP, images: jax.Array, labels: jax.Array) -> jax.Array:
    return jnp.mean(jnp.argmax(model(images), axis=-1) == labels)
