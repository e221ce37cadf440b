"""The capstone's model: a small byte-level decoder that reads packed rows.

Lesson 10's model has one attention layer; a decoder stacks a few *blocks*, each an
attention layer and a feed-forward layer, with layer norm before each and a residual
connection around it. The packed-row rules are lesson 10's and come from the same place
(`course_lib.sequence_model`):

- attention stays inside each packed sequence and is causal (`attention_mask`);
- positions restart at 0 for every sequence (the `positions` array of the packer);
- the next-byte loss counts a slot only when the next slot continues the same sequence
  (`loss_mask`), so a boundary and the padding never count.

`train_step` is one step of Adam on the masked loss; it also returns what a data-parallel
run wants to log from the *global* batch: how many real (non-padding) tokens it held, and a
checksum of its tokens that two runs can compare bit for bit.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from course_lib.sequence_model import VOCABULARY, attention_mask, loss_mask


class Block(nnx.Module):
    """Pre-norm attention, then a pre-norm two-layer MLP, each with a residual connection."""

    def __init__(self, features: int, heads: int, *, rngs: nnx.Rngs):
        self.attention_norm = nnx.LayerNorm(features, rngs=rngs)
        self.attention = nnx.MultiHeadAttention(num_heads=heads, in_features=features,
                                                qkv_features=features, decode=False,
                                                rngs=rngs)
        self.mlp_norm = nnx.LayerNorm(features, rngs=rngs)
        self.hidden = nnx.Linear(features, 4 * features, rngs=rngs)
        self.out = nnx.Linear(4 * features, features, rngs=rngs)

    def __call__(self, x: jax.Array, mask: jax.Array) -> jax.Array:
        x = x + self.attention(self.attention_norm(x), mask=mask)
        return x + self.out(jax.nn.gelu(self.hidden(self.mlp_norm(x))))


class Decoder(nnx.Module):
    """Byte and position embeddings, `layers` blocks, a final norm and a byte classifier."""

    def __init__(self, max_length: int, features: int = 64, heads: int = 4, layers: int = 2,
                 *, rngs: nnx.Rngs):
        self.tokens = nnx.Embed(VOCABULARY, features, rngs=rngs)
        self.positions = nnx.Embed(max_length, features, rngs=rngs)
        self.layers = layers
        for layer in range(layers):  # one attribute per block: works on every Flax NNX
            setattr(self, f"block{layer}", Block(features, heads, rngs=rngs))
        self.norm = nnx.LayerNorm(features, rngs=rngs)
        self.head = nnx.Linear(features, VOCABULARY, rngs=rngs)

    def __call__(self, tokens: jax.Array, segment_ids: jax.Array,
                 positions: jax.Array) -> jax.Array:
        mask = attention_mask(segment_ids)
        x = self.tokens(tokens) + self.positions(positions)
        for layer in range(self.layers):
            x = getattr(self, f"block{layer}")(x, mask)
        return self.head(self.norm(x))


def create_training(max_length: int, *, seed: int = 0, learning_rate: float = 3e-3,
                    features: int = 64, layers: int = 2) -> tuple[Decoder, nnx.Optimizer]:
    """A fresh decoder (weights drawn from `seed`) and its Adam optimizer."""
    model = Decoder(max_length, features=features, layers=layers, rngs=nnx.Rngs(seed))
    return model, nnx.Optimizer(model, optax.adam(learning_rate), wrt=nnx.Param)


def loss_fn(model: Decoder, tokens: jax.Array, segment_ids: jax.Array,
            positions: jax.Array) -> jax.Array:
    """Mean next-byte cross-entropy over the slots the loss mask keeps."""
    logits = model(tokens, segment_ids, positions)
    losses = optax.softmax_cross_entropy_with_integer_labels(logits[:, :-1], tokens[:, 1:])
    counted = loss_mask(segment_ids)
    return jnp.sum(losses * counted) / jnp.maximum(jnp.sum(counted), 1)


def batch_checksum(tokens: jax.Array) -> jax.Array:
    """A uint32 fingerprint of a batch's tokens and their places (wrapping arithmetic, so
    it is exact): two batches with the same checksum almost surely hold the same tokens."""
    weights = jnp.arange(1, tokens.size + 1, dtype=jnp.uint32).reshape(tokens.shape)
    return jnp.sum(tokens.astype(jnp.uint32) * (weights * jnp.uint32(2654435761)),
                   dtype=jnp.uint32)


def train_step(model: Decoder, optimizer: nnx.Optimizer, tokens: jax.Array,
               segment_ids: jax.Array, positions: jax.Array) -> dict[str, jax.Array]:
    """One Adam step on the masked loss; returns the loss, the real tokens and the checksum
    of the (global) batch. Wrap it in `nnx.jit`."""
    loss, grads = nnx.value_and_grad(loss_fn)(model, tokens, segment_ids, positions)
    optimizer.update(model, grads)
    return {"loss": loss, "real_tokens": jnp.sum(segment_ids > 0),
            "checksum": batch_checksum(tokens)}
