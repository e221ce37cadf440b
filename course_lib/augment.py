"""Ready-made image augmentations: decode, normalise, flip, crop.

Every transform here works on one record or, with `batched=True`, on a whole batch (placed
after `Batch` in the operations). Batched versions draw one random choice per image from
the single `rng` they are given and apply them with NumPy in one go, which is much faster
than a Python loop over the batch.

Records are usually dicts such as `{"image": ..., "label": ...}`: `field` names the entry to
change, and the other entries are passed through untouched. A record that is a bare array is
changed directly. Images are `(H, W)` or `(H, W, C)`; batches add a leading axis.
"""

from __future__ import annotations

import io
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

from course_lib._checks import check_bool, check_int
from course_lib.transforms import MapTransform, RandomMapTransform

_MISSING = object()  # a dict value no record holds
_PAD_MODES = ("constant", "edge", "reflect", "symmetric", "wrap")


def _check_field(field: Any) -> str | None:
    if field is not None and not isinstance(field, str):
        raise TypeError(
            f"field={field!r} must be a string or None. Pass the dict key of the image, "
            "e.g. field='image', or None when each record is the image itself.")
    return field


def _check_real(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name}={value!r} must be a number, got {type(value).__name__}.")
    return float(value)


def _check_per_channel(name: str, value: Any) -> np.ndarray:
    """A number, or one number per channel, as a float64 array."""
    array = np.asarray(value)
    if array.ndim > 1 or array.size == 0 or not np.issubdtype(array.dtype, np.number):
        raise ValueError(
            f"{name}={value!r} must be a number or a flat list of numbers, one per channel, "
            f"e.g. {name}=0.5 or {name}=(0.5, 0.5, 0.5).")
    return array.astype(np.float64)


class _FieldTransform:
    """Finds the image in a record and puts the changed image back.

    Subclasses call `self._image(element)` and `self._replace(element, image)`; both also
    check the number of image axes, so a wrong `batched=` fails with a clear message.
    """

    field: str | None
    batched: bool

    def _image(self, element: Any) -> np.ndarray:
        # Runs for every record: the common case (a dict holding an array) takes three
        # cheap steps; everything unusual goes to `_explain`, which raises a helpful error.
        if type(element) is dict or isinstance(element, dict):
            image = element.get(self.field, _MISSING) if self.field is not None else _MISSING
            if image is _MISSING:
                self._explain(element)
        else:
            image = element
        if type(image) is not np.ndarray:
            image = np.asarray(image)
        if image.ndim not in ((3, 4) if self.batched else (2, 3)):
            self._explain_shape(image)
        return image

    def _explain(self, element: dict):
        if self.field is None:
            raise TypeError(
                f"{type(self).__name__}(field=None) got a dict with keys "
                f"{sorted(element)}. Pass field=<the key holding the image>.")
        raise KeyError(
            f"{type(self).__name__}(field={self.field!r}): the record has no key "
            f"{self.field!r}, only {sorted(element)}. Pass the right field=.")

    def _explain_shape(self, image: np.ndarray):
        layout = "(N, H, W) or (N, H, W, C)" if self.batched else "(H, W) or (H, W, C)"
        hint = ("; pass batched=False for single images" if self.batched
                else "; pass batched=True when this transform comes after Batch")
        raise ValueError(
            f"{type(self).__name__}(batched={self.batched}) expects images of shape "
            f"{layout}, got shape {image.shape}{hint}.")

    def _replace(self, element: Any, image: np.ndarray) -> Any:
        if type(element) is dict or isinstance(element, dict):
            changed = element.copy()  # never change the caller's record in place
            changed[self.field] = image
            return changed
        return image


class Normalize(_FieldTransform, MapTransform):
    """Convert pixels to floats and standardise them: `(x * scale - mean) / std`.

    This runs on every pixel of every record, so the three constants are folded into one
    multiply and one add, done in place on the single new array that `astype` creates.

    Args:
      mean, std: a number, or one number per channel (last axis); applied after `scale`.
      scale: multiplies the raw values first; the default maps uint8 0..255 to 0..1.
      dtype: a floating dtype for the output.
    """

    def __init__(self, mean: float | Sequence[float] = 0.0, std: float | Sequence[float] = 1.0,
                 scale: float = 1 / 255, dtype: Any = np.float32, *,
                 field: str | None = "image", batched: bool = False):
        mean_array = _check_per_channel("mean", mean)
        std_array = _check_per_channel("std", std)
        if np.any(std_array == 0) or not np.all(np.isfinite(std_array)):
            raise ValueError(
                f"std={std!r} must be finite and non-zero: dividing by it would give inf. "
                "Pass the data's standard deviation, or std=1.0 to skip the division.")
        scale = _check_real("scale", scale)
        try:
            self.dtype = np.dtype(dtype)
        except TypeError as error:
            raise TypeError(f"dtype={dtype!r} is not a NumPy dtype. Pass e.g. np.float32.") \
                from error
        if not np.issubdtype(self.dtype, np.floating):
            raise TypeError(
                f"dtype={self.dtype} must be a floating dtype: normalised pixels are "
                "fractions. Pass np.float32 (or np.float16 / np.float64).")
        self.mean, self.std, self.scale = mean, std, scale
        self.field = _check_field(field)
        self.batched = check_bool("batched", batched)
        # (x * scale - mean) / std  ==  x * multiplier + offset
        self._multiplier = (scale / std_array).astype(self.dtype)
        self._offset = (-mean_array / std_array).astype(self.dtype)
        self._channels = max(self._multiplier.size, self._offset.size)
        self._has_offset = bool(np.any(self._offset != 0))
        if self._channels == 1:  # NumPy scalars: a third faster than 1-element arrays
            self._multiplier = self._multiplier.reshape(())[()]
            self._offset = self._offset.reshape(())[()]

    def map(self, element):
        image = self._image(element)
        if self._channels > 1:
            has_channel_axis = image.ndim == (4 if self.batched else 3)
            if not (has_channel_axis and image.shape[-1] == self._channels):
                raise ValueError(
                    f"Normalize has {self._channels} per-channel values but the image has "
                    f"shape {image.shape}. Pass one mean/std per channel (last axis), or "
                    "single numbers.")
        out = image.astype(self.dtype)  # the one new array; the rest happens in place
        out *= self._multiplier
        if self._has_offset:
            out += self._offset
        return self._replace(element, out)

    def __repr__(self) -> str:
        return (f"Normalize(mean={self.mean!r}, std={self.std!r}, scale={self.scale!r}, "
                f"dtype={self.dtype}, field={self.field!r}, batched={self.batched})")


class RandomHorizontalFlip(_FieldTransform, RandomMapTransform):
    """Mirror the image left-right with probability `p`.

    Exactly one `rng.random()` is drawn per image whatever `p` is, so changing `p` never
    shifts the random stream of the transforms that follow. An unbatched flip returns a
    view (`x[:, ::-1]`), which costs no copy.
    """

    def __init__(self, p: float = 0.5, *, field: str | None = "image", batched: bool = False):
        self.p = _check_real("p", p)
        if not 0.0 <= self.p <= 1.0:
            raise ValueError(
                f"p={p!r} is a probability and must be in [0, 1]. Pass e.g. p=0.5 to flip "
                "half of the images.")
        self.field = _check_field(field)
        self.batched = check_bool("batched", batched)

    def random_map(self, element, rng: np.random.Generator):
        image = self._image(element)
        if not self.batched:
            flipped = image[:, ::-1] if rng.random() < self.p else image
            return self._replace(element, flipped)
        flip = rng.random(len(image)) < self.p
        flipped = image.copy()  # never write into the caller's array
        flipped[flip] = image[flip, :, ::-1]
        return self._replace(element, flipped)

    def __repr__(self) -> str:
        return f"RandomHorizontalFlip(p={self.p}, field={self.field!r}, batched={self.batched})"


def _check_size(size: Any) -> tuple[int, int]:
    fix = "Pass size=<side> for a square crop or size=(height, width)."
    if isinstance(size, numbers.Integral) and not isinstance(size, bool):
        side = check_int("size", size, minimum=1, fix=fix)
        return side, side
    if isinstance(size, Sequence) and len(size) == 2:
        return (check_int("size[0]", size[0], minimum=1, fix=fix),
                check_int("size[1]", size[1], minimum=1, fix=fix))
    raise TypeError(f"size={size!r} must be an int or a pair of ints. {fix}")


class RandomCrop(_FieldTransform, RandomMapTransform):
    """Pad the image by `padding` pixels on each side, then cut a random `size` window.

    Padding and cropping shifts the digit or object by up to `padding` pixels, the classic
    augmentation for small images such as MNIST and CIFAR.

    Args:
      size: the output height and width: an int for a square, or `(height, width)`.
      padding: pixels added to the top, bottom, left and right before cropping.
      pad_mode: how the border is filled, as in `np.pad`: "constant" (zeros), "edge",
        "reflect", "symmetric" or "wrap".
    """

    def __init__(self, size: int | tuple[int, int], padding: int = 0,
                 pad_mode: str = "constant", *, field: str | None = "image",
                 batched: bool = False):
        self.size = _check_size(size)
        self.padding = check_int("padding", padding, minimum=0,
                                 fix="Pass padding=0 for no padding, or e.g. padding=4.")
        if pad_mode not in _PAD_MODES:
            raise ValueError(f"pad_mode={pad_mode!r} is not one of {_PAD_MODES}. "
                             "Pass pad_mode='constant' to pad with zeros.")
        self.pad_mode = pad_mode
        self.field = _check_field(field)
        self.batched = check_bool("batched", batched)

    def _pad(self, image: np.ndarray) -> np.ndarray:
        if self.padding == 0:
            return image
        height_axis = 1 if self.batched else 0
        widths = [(0, 0)] * image.ndim
        widths[height_axis] = widths[height_axis + 1] = (self.padding, self.padding)
        return np.pad(image, widths, mode=self.pad_mode)

    def random_map(self, element, rng: np.random.Generator):
        original = self._image(element)
        height_axis = 1 if self.batched else 0
        padded_height, padded_width = (size + 2 * self.padding for size in
                                       original.shape[height_axis:height_axis + 2])
        height, width = self.size
        if height > padded_height or width > padded_width:
            raise ValueError(
                f"size={self.size} is larger than the padded image ({padded_height}, "
                f"{padded_width}) (image plus padding={self.padding} on each side). Pass a "
                "smaller size or a larger padding.")
        top_range, left_range = padded_height - height + 1, padded_width - width + 1
        if not self.batched:
            top, left = rng.integers(0, [top_range, left_range])
            if self.pad_mode == "constant":  # the same pixels, without building the padding
                return self._replace(element, self._crop_zero_padded(original, top, left))
            image = self._pad(original)
            return self._replace(element, image[top:top + height, left:left + width])
        image = self._pad(original)
        count = len(image)
        tops = rng.integers(0, top_range, size=count)
        lefts = rng.integers(0, left_range, size=count)
        rows = tops[:, None, None] + np.arange(height)[None, :, None]  # (N, h, 1)
        columns = lefts[:, None, None] + np.arange(width)[None, None, :]  # (N, 1, w)
        crops = image[np.arange(count)[:, None, None], rows, columns]  # (N, h, w[, C])
        return self._replace(element, crops)

    def _crop_zero_padded(self, image: np.ndarray, top: int, left: int) -> np.ndarray:
        """The window at (top, left) of the image padded with zeros: a zero canvas with the
        part of the image that falls inside the window copied in (np.pad would first copy
        the whole image into a larger array)."""
        height, width = self.size
        crop = np.zeros((height, width, *image.shape[2:]), dtype=image.dtype)
        row, column = int(top) - self.padding, int(left) - self.padding  # in the image
        rows = slice(max(row, 0), min(row + height, image.shape[0]))
        columns = slice(max(column, 0), min(column + width, image.shape[1]))
        if rows.start < rows.stop and columns.start < columns.stop:
            crop[rows.start - row:rows.stop - row, columns.start - column:columns.stop - column] = \
                image[rows, columns]
        return crop

    def __repr__(self) -> str:
        return (f"RandomCrop(size={self.size}, padding={self.padding}, "
                f"pad_mode={self.pad_mode!r}, field={self.field!r}, batched={self.batched})")


class DecodeImage(MapTransform):
    """Decode PNG or JPEG bytes into a uint8 array of shape (H, W) or (H, W, C).

    Decoding is the expensive step of reading images from disk, which is why sources hand
    out raw bytes and this transform runs in the (parallel) workers.

    Args:
      field: the dict key holding the bytes; None when each record is the bytes itself.
      mode: a Pillow mode to convert to after decoding, e.g. "L" (grey) or "RGB"; None keeps
        the file's own mode.
    """

    def __init__(self, field: str | None = "image", mode: str | None = None):
        from PIL import Image  # here, not at the top: workers that decode nothing skip Pillow

        self.field = _check_field(field)
        if mode is not None and mode not in Image.MODES:
            raise ValueError(f"mode={mode!r} is not a Pillow mode. Pass None to keep the "
                             "file's mode, or one of 'L', 'RGB', 'RGBA'.")
        self.mode = mode

    def map(self, element):
        from PIL import Image, UnidentifiedImageError

        encoded = element[self.field] if isinstance(element, dict) else element
        where = f"element[{self.field!r}]" if isinstance(element, dict) else "the record"
        if not isinstance(encoded, bytes | bytearray | memoryview):
            raise TypeError(
                f"DecodeImage expects {where} to be encoded image bytes, got "
                f"{type(encoded).__name__}. If it is already an array, remove DecodeImage.")
        try:
            with Image.open(io.BytesIO(encoded)) as picture:
                if self.mode is not None and picture.mode != self.mode:
                    picture = picture.convert(self.mode)
                pixels = np.array(picture)
        except UnidentifiedImageError as error:
            raise ValueError(f"{where} holds {len(encoded)} bytes that Pillow cannot decode "
                             "as an image. Check the file is a PNG or JPEG.") from error
        if isinstance(element, dict):
            return {**element, self.field: pixels}
        return pixels

    def __repr__(self) -> str:
        return f"DecodeImage(field={self.field!r}, mode={self.mode!r})"
