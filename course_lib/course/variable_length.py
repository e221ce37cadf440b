"""Lesson 10, variable-length sequences: the real sequences and the lesson's two pictures.

The sequences are the docstrings of the installed Python's own standard library, read with
`ast` from its source files and tokenised at the byte level: every machine has them, nothing
is downloaded, and their lengths have the long tail of real text. How many there are
changes with the Python version, so no checked cell prints their count. The loaders, the
loops and the measurements are written in the lesson's cells.
"""

from __future__ import annotations

import ast
import functools
import sysconfig
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

ROW_LENGTH = 128  # bytes per row, and the longest sequence the lesson keeps
BATCH_SIZE = 8


@functools.cache
def _stdlib_docstrings() -> tuple[bytes, ...]:
    """Every docstring (modules, classes, functions) of the top-level stdlib modules, in a
    fixed order: files sorted by name, nodes in `ast.walk` order."""
    root = Path(sysconfig.get_paths()["stdlib"])
    found = []
    for path in sorted(root.glob("*.py")):
        try:
            tree = ast.parse(path.read_bytes())
        except (SyntaxError, ValueError):  # a test file written to be broken
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                text = ast.get_docstring(node, clean=True)
                if text:
                    found.append(text.encode("utf-8"))
    return tuple(found)


def _tokens(text: bytes) -> np.ndarray:
    return np.frombuffer(text, np.uint8).astype(np.int32)


def docstring_sequences(max_length: int | None = ROW_LENGTH,
                        limit: int | None = None) -> list[np.ndarray]:
    """The stdlib's docstrings of at most `max_length` bytes (None: all of them), as int32
    byte tokens (never 0: text has no NUL byte, so 0 is free for padding); the first
    `limit` of them."""
    kept = [text for text in _stdlib_docstrings()
            if max_length is None or len(text) <= max_length]
    return [_tokens(text) for text in kept[:limit]]


def longest_docstring() -> np.ndarray:
    """The longest docstring of the stdlib, as tokens: one that fits no row."""
    return _tokens(max(_stdlib_docstrings(), key=len))


def split_into_rows(tokens: np.ndarray, row_length: int = ROW_LENGTH) -> list[np.ndarray]:
    """A sequence cut into consecutive pieces of at most `row_length` tokens: every token
    kept, none repeated. Each piece is trained on as a sequence of its own."""
    if row_length < 1:
        raise ValueError(f"row_length={row_length} must be at least 1: pass the row length "
                         "of the packer, e.g. 128.")
    return [tokens[start:start + row_length] for start in range(0, len(tokens), row_length)]


class SequenceSource:
    """A data source of variable-length sequences, stored as one flat array and offsets.

    One flat array (not a list of small ones) is what worker processes map once from shared
    memory instead of unpickling thousands of arrays."""

    def __init__(self, sequences: Sequence[np.ndarray]):
        lengths = [len(sequence) for sequence in sequences]
        self.offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        self.tokens = (np.concatenate(sequences) if sequences else np.zeros(0, np.int32))

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, record_key: int) -> np.ndarray:
        return self.tokens[self.offsets[record_key]:self.offsets[record_key + 1]].copy()

    def __repr__(self) -> str:
        return f"SequenceSource({len(self)} sequences)"


def plot_tradeoff(points: Mapping[str, Mapping[str, tuple[int, float]]],
                  packed: tuple[int, float]):
    """Padding against compilations. `points`: a line per grouping ("stream order",
    "grouped"), each mapping a point's label (a number of buckets, or "longest") to its
    (batch shapes, padding share); `packed`: packing's (batch shapes, padding share)."""
    import matplotlib.pyplot as plt

    figure, ax = plt.subplots(figsize=(8, 4))
    placed: dict[tuple, list[str]] = {}  # (label, x, y as drawn) -> colours of its lines
    for (line, by_label), color in zip(points.items(), ["tab:red", "tab:blue"], strict=False):
        ax.plot([x for x, _ in by_label.values()], [100 * y for _, y in by_label.values()],
                marker="o", color=color, label=line)
        for label, (x, y) in by_label.items():
            placed.setdefault((label, x, round(100 * y)), []).append(color)
    for (label, x, y), colors in placed.items():  # lines that meet: one black label
        ax.annotate(label, (x, y), textcoords="offset points", xytext=(4, 5), fontsize=8,
                    color=colors[0] if len(colors) == 1 else "black")
    ax.plot([packed[0]], [100 * packed[1]], marker="*", markersize=14, color="tab:green",
            linestyle="none", label="packing")
    most = max(x for by_label in points.values() for x, _ in by_label.values())
    ticks = [2**k for k in range(max(1, most).bit_length() + 1)]
    ax.set_xscale("log")
    ax.set_xticks(ticks, [str(tick) for tick in ticks])
    ax.minorticks_off()
    ax.set_xlabel("batch shapes in one epoch = compilations of a jitted step (log scale)")
    ax.set_ylabel("padding (% of slots)")
    ax.set_ylim(0, 100)
    ax.legend(fontsize=8, loc="upper right")
    ax.set_title("Padding against compilations, one epoch: a point per number of buckets\n"
                 "(\"longest\": each batch padded to its own longest sequence)", fontsize=10)
    figure.tight_layout()
    return figure


def plot_mask(segment_ids: np.ndarray):
    """The attention mask of one whole packed row, from its segment ids: each allowed
    query-key pair coloured by its segment, masked pairs white, with a key."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    from course_lib.sequence_model import attention_mask

    ids = np.asarray(segment_ids)[None, :]
    mask = np.asarray(attention_mask(ids))[0, 0]
    count = int(ids.max())
    colours = ["white", *[plt.get_cmap("tab10")(k % 10) for k in range(count)]]
    picture = np.where(mask, ids[0][:, None], 0)  # the query's segment where allowed, else 0
    figure, ax = plt.subplots(figsize=(6.4, 5.2))
    ax.imshow(picture, cmap=ListedColormap(colours), vmin=-0.5, vmax=count + 0.5,
              interpolation="nearest")
    ax.set_xlabel("key slot (may be looked at)")
    ax.set_ylabel("query slot (looks)")
    for start in np.flatnonzero(np.diff(ids[0], prepend=-1)):  # every boundary
        ax.axvline(start - 0.5, color="0.8", linewidth=0.5)
        ax.axhline(start - 0.5, color="0.8", linewidth=0.5)
    key = [Patch(color=colours[k], label=f"sequence {k} attends to itself")
           for k in range(1, count + 1)]
    key.append(Patch(facecolor="white", edgecolor="0.5",
                     label="masked: other sequence, a later slot, or padding"))
    ax.legend(handles=key, loc="upper left", bbox_to_anchor=(1.02, 1), fontsize=8)
    padding = int(np.sum(ids[0] == 0))
    ax.set_title(f"Who may attend to whom in one packed row of {ids.shape[1]} slots\n"
                 f"({count} sequences, {padding} padding slots; thin lines are boundaries)",
                 fontsize=10)
    figure.tight_layout()
    return figure
