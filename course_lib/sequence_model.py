"""Lesson 10's model: bytes in, next byte out, through one attention layer that reads packed rows.

A packed row holds several sequences end to end. Two masks, both computed from the segment
ids that `PackAndBatchOperation` hands out, keep them apart:

- the **attention mask**: query `q` may look at key `k` only when both belong to the same
  sequence (the same non-zero segment id) and `k` is not later than `q` (causal);
- the **loss mask**: a position counts in the loss only when it and the next one are in
  the same sequence, so no sequence is asked to predict the first byte of its neighbour,
  and padding never counts.

With both, the output for a sequence is what it would be alone in a row: lesson 10 proves it.
Token positions come from `positions` (0, 1, 2, ... inside each sequence), not from the slot
in the row, for the same reason.

A padding query attends to nothing, so every one of its logits gets the same large negative
fill and its softmax is uniform: its output is an average of every value in the row. That is
harmless only because the loss mask never scores a padding slot.

The training step is the whole step (loss, gradients, an Optax update), so that a lesson that
times it times what training costs. The loss is a mean over the tokens the loss mask keeps in
each batch; when that count varies from batch to batch, `loss_sum_and_count` gives the sum
and the count, for a mean over several batches or a fixed divisor instead.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from flax import nnx

VOCABULARY = 256  # byte-level tokens


def segment_mask(segment_ids: jax.Array) -> jax.Array:
    """(..., T) ids -> (..., T, T): True where query and key share a non-padding segment."""
    queries, keys = segment_ids[..., :, None], segment_ids[..., None, :]
    return (queries == keys) & (queries > 0)


def attention_mask(segment_ids: jax.Array) -> jax.Array:
    """The segment mask, made causal, with a heads axis: shape (B, 1, T, T)."""
    length = segment_ids.shape[-1]
    causal = jnp.tril(jnp.ones((length, length), bool))
    return (segment_mask(segment_ids) & causal)[:, None]


def loss_mask(segment_ids: jax.Array) -> jax.Array:
    """(B, T - 1): True where position t + 1 continues the sequence of position t."""
    return (segment_ids[:, 1:] == segment_ids[:, :-1]) & (segment_ids[:, 1:] > 0)


class ByteAttention(nnx.Module):
    """Token and position embeddings, one masked self-attention layer, a byte classifier."""

    def __init__(self, max_length: int, features: int = 32, heads: int = 2, *,
                 rngs: nnx.Rngs):
        self.tokens = nnx.Embed(VOCABULARY, features, rngs=rngs)
        self.positions = nnx.Embed(max_length, features, rngs=rngs)
        self.attention = nnx.MultiHeadAttention(num_heads=heads, in_features=features,
                                                qkv_features=features, decode=False,
                                                rngs=rngs)
        self.head = nnx.Linear(features, VOCABULARY, rngs=rngs)

    def __call__(self, tokens: jax.Array, segment_ids: jax.Array,
                 positions: jax.Array, mask: jax.Array | None = None) -> jax.Array:
        """Logits `(B, T, 256)`. `mask` (B, 1, T, T) replaces the one built from
        `segment_ids`, for trying another mask."""
        x = self.tokens(tokens) + self.positions(positions)
        x = x + self.attention(x, mask=attention_mask(segment_ids) if mask is None else mask)
        return self.head(x)


def create_model(max_length: int, *, seed: int = 0) -> ByteAttention:
    return ByteAttention(max_length, rngs=nnx.Rngs(seed))


def loss_sum_and_count(model: ByteAttention, tokens: jax.Array, segment_ids: jax.Array,
                       positions: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The next-byte cross-entropy summed over the positions the loss mask keeps, and their
    count."""
    logits = model(tokens, segment_ids, positions)
    losses = optax.softmax_cross_entropy_with_integer_labels(logits[:, :-1], tokens[:, 1:])
    counted = loss_mask(segment_ids)
    return jnp.sum(losses * counted), jnp.sum(counted)


def loss_fn(model: ByteAttention, tokens: jax.Array, segment_ids: jax.Array,
            positions: jax.Array) -> jax.Array:
    """Mean next-byte cross-entropy over the positions the loss mask keeps, in this batch."""
    total, count = loss_sum_and_count(model, tokens, segment_ids, positions)
    return total / jnp.maximum(count, 1)


def create_optimizer(model: ByteAttention, learning_rate: float = 1e-3) -> nnx.Optimizer:
    """Adam over the model's parameters."""
    return nnx.Optimizer(model, optax.adam(learning_rate), wrt=nnx.Param)


def train_step(model: ByteAttention, optimizer: nnx.Optimizer, tokens: jax.Array,
               segment_ids: jax.Array, positions: jax.Array) -> jax.Array:
    """One training step: the loss, its gradients, and the optimizer's update, in place.
    Jit it (`nnx.jit(train_step)`); returns the loss before the update."""
    loss, grads = nnx.value_and_grad(loss_fn)(model, tokens, segment_ids, positions)
    optimizer.update(model, grads)
    return loss

