"""Augmentations: checked against plain NumPy on small images."""

import collections
import io

import numpy as np
import pytest
from PIL import Image

from course_lib.augment import DecodeImage, Normalize, RandomCrop, RandomHorizontalFlip
from course_lib.transforms import MapTransform, RandomMapTransform


def rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


@pytest.fixture
def images() -> np.ndarray:
    return np.random.default_rng(0).integers(0, 256, size=(64, 6, 5, 3), dtype=np.uint8)


# --- Normalize ---------------------------------------------------------------------------


def test_normalize_matches_the_textbook_formula_per_channel(images):
    mean, std = (0.1, 0.2, 0.3), (0.5, 0.25, 2.0)
    out = Normalize(mean=mean, std=std).map({"image": images[0], "label": 3})
    expected = (images[0].astype(np.float64) / 255 - np.array(mean)) / np.array(std)
    assert out["image"].dtype == np.float32
    assert out["label"] == 3
    np.testing.assert_allclose(out["image"], expected, rtol=1e-5, atol=1e-6)


def test_normalize_leaves_the_input_record_untouched(images):
    image = images[0]
    record = {"image": image, "label": 1}
    before = image.copy()
    out = Normalize(mean=0.5, std=0.5).map(record)
    assert out is not record and record["image"] is image
    np.testing.assert_array_equal(image, before)


def test_normalize_batched_equals_per_image(images):
    one_by_one = np.stack([Normalize(0.5, 0.25, field=None).map(image) for image in images])
    batched = Normalize(0.5, 0.25, field=None, batched=True).map(images)
    np.testing.assert_array_equal(batched, one_by_one)


def test_normalize_respects_dtype_and_scale():
    out = Normalize(scale=1.0, dtype=np.float64, field=None).map(np.full((2, 2), 7, np.uint8))
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out, np.full((2, 2), 7.0))


@pytest.mark.parametrize("kwargs, error, pattern", [
    ({"std": 0.0}, ValueError, r"std=0\.0 must be finite and non-zero.*std=1\.0"),
    ({"std": (1.0, 0.0, 1.0)}, ValueError, r"non-zero"),
    ({"mean": "a"}, ValueError, r"mean='a' must be a number"),
    ({"dtype": np.int32}, TypeError, r"dtype=int32 must be a floating dtype.*np\.float32"),
    ({"scale": None}, TypeError, r"scale=None must be a number"),
    ({"field": 3}, TypeError, r"field=3 must be a string or None"),
])
def test_normalize_rejects_bad_arguments_with_the_fix(kwargs, error, pattern):
    with pytest.raises(error, match=pattern):
        Normalize(**kwargs)


def test_normalize_names_a_channel_count_mismatch():
    with pytest.raises(ValueError, match=r"3 per-channel values.*shape \(4, 4\)"):
        Normalize(mean=(0.1, 0.2, 0.3), field=None).map(np.zeros((4, 4), np.uint8))


def test_wrong_batched_flag_says_which_to_pass(images):
    with pytest.raises(ValueError, match=r"batched=True when this transform comes after Batch"):
        Normalize(field=None).map(images[:, :, :, 0][:, None])  # a 4-D batch, unbatched


def test_dict_without_the_field_lists_the_keys():
    with pytest.raises(KeyError, match=r"no key 'image', only \['pixels'\]"):
        Normalize().map({"pixels": np.zeros((2, 2), np.uint8)})


def test_field_none_with_a_dict_record_asks_for_the_field():
    with pytest.raises(TypeError, match=r"field=None\) got a dict with keys \['image'\]"):
        Normalize(field=None).map({"image": np.zeros((2, 2), np.uint8)})


def test_dict_subclass_records_keep_their_type_and_are_not_changed_in_place():
    record = collections.OrderedDict(image=np.full((2, 2), 255, np.uint8), label=3)
    out = Normalize(field="image").map(record)
    assert type(out) is collections.OrderedDict and list(out) == ["image", "label"]
    assert out["image"].dtype == np.float32 and np.allclose(out["image"], 1.0)
    assert record["image"].dtype == np.uint8, "the caller's record was changed in place"


# --- RandomHorizontalFlip ----------------------------------------------------------------


def test_flip_is_either_the_image_or_its_mirror_and_a_view(images):
    flip = RandomHorizontalFlip(p=1.0, field=None)
    out = flip.random_map(images[0], rng(0))
    np.testing.assert_array_equal(out, images[0][:, ::-1])
    assert np.shares_memory(out, images[0])


def test_flip_is_deterministic_per_seed_and_varies_across_seeds(images):
    flip = RandomHorizontalFlip(field=None)

    def flipped(seed):
        return [not np.array_equal(flip.random_map(image, rng(seed * 1000 + i)), image)
                for i, image in enumerate(images)]

    assert flipped(1) == flipped(1)
    assert flipped(1) != flipped(2)


def test_flip_fraction_is_close_to_p():
    flip = RandomHorizontalFlip(p=0.3, field=None)
    image = np.arange(6, dtype=np.uint8).reshape(2, 3)
    generator = rng(0)
    flips = [flip.random_map(image, generator)[0, 0] == 2 for _ in range(4000)]
    assert abs(np.mean(flips) - 0.3) < 0.03


def test_flip_draws_exactly_one_number_per_record_whatever_p():
    image = np.zeros((2, 2))
    for p in (0.0, 0.5, 1.0):
        generator = rng(5)
        RandomHorizontalFlip(p=p, field=None).random_map(image, generator)
        assert generator.random() == rng(5).random(2)[1]


def test_batched_flip_flips_each_image_independently_about_p():
    batch = np.tile(np.arange(4, dtype=np.uint8), (2000, 3, 1))  # (N, 3, 4): rows 0..3
    out = RandomHorizontalFlip(p=0.25, field=None, batched=True).random_map(batch, rng(0))
    assert out.shape == batch.shape and out.dtype == batch.dtype
    flipped = out[:, 0, 0] == 3
    np.testing.assert_array_equal(out[flipped], batch[flipped][:, :, ::-1])
    np.testing.assert_array_equal(out[~flipped], batch[~flipped])
    assert abs(flipped.mean() - 0.25) < 0.03


def test_batched_flip_on_a_dict_uses_width_axis_2(images):
    out = RandomHorizontalFlip(p=1.0, batched=True).random_map({"image": images}, rng(0))
    np.testing.assert_array_equal(out["image"], images[:, :, ::-1])


@pytest.mark.parametrize("p", [-0.1, 1.5])
def test_flip_rejects_p_outside_unit_interval(p):
    with pytest.raises(ValueError, match=rf"p={p} is a probability and must be in \[0, 1\]"):
        RandomHorizontalFlip(p=p)


def test_flip_rejects_non_number_p():
    with pytest.raises(TypeError, match=r"p='half' must be a number"):
        RandomHorizontalFlip(p="half")


# --- RandomCrop --------------------------------------------------------------------------


def windows(padded: np.ndarray, height: int, width: int) -> list[np.ndarray]:
    """Every (height, width) window of an (H, W, ...) image, by brute force."""
    return [padded[top:top + height, left:left + width]
            for top in range(padded.shape[0] - height + 1)
            for left in range(padded.shape[1] - width + 1)]


def test_crop_is_a_window_of_the_padded_image(images):
    crop = RandomCrop((4, 3), padding=1, field=None)
    padded = np.pad(images[0], ((1, 1), (1, 1), (0, 0)))
    for seed in range(20):
        out = crop.random_map(images[0], rng(seed))
        assert out.shape == (4, 3, 3) and out.dtype == np.uint8
        assert any(np.array_equal(out, window) for window in windows(padded, 4, 3))


def test_crop_reaches_every_offset_and_is_deterministic():
    image = np.arange(25, dtype=np.int64).reshape(5, 5)
    crop = RandomCrop(3, field=None)
    corners = {int(crop.random_map(image, rng(seed))[0, 0]) for seed in range(300)}
    assert corners == {row * 5 + column for row in range(3) for column in range(3)}
    np.testing.assert_array_equal(crop.random_map(image, rng(7)), crop.random_map(image, rng(7)))


def test_crop_pad_mode_edge_repeats_the_border():
    image = np.arange(4, dtype=np.uint8).reshape(2, 2) + 10
    crop = RandomCrop(4, padding=1, pad_mode="edge", field=None)
    np.testing.assert_array_equal(crop.random_map(image, rng(0)),
                                  np.pad(image, 1, mode="edge"))


def test_batched_crop_matches_brute_force_and_spreads_offsets():
    batch = np.random.default_rng(1).integers(0, 256, size=(500, 4, 4), dtype=np.uint8)
    out = RandomCrop(3, padding=1, field=None, batched=True).random_map(batch, rng(0))
    assert out.shape == (500, 3, 3)
    offsets = set()
    for image, crop in zip(batch, out, strict=True):
        candidates = windows(np.pad(image, 1), 3, 3)
        matches = [i for i, window in enumerate(candidates) if np.array_equal(window, crop)]
        assert matches
        offsets.add(matches[0])
    assert len(offsets) == 16  # all 4 x 4 offsets of a 6 x 6 padded image occur


def test_batched_crop_keeps_channels(images):
    out = RandomCrop((5, 4), batched=True).random_map({"image": images, "label": 0}, rng(0))
    assert out["image"].shape == (64, 5, 4, 3) and out["label"] == 0


def test_crop_larger_than_padded_image_says_how_to_fix():
    crop = RandomCrop(8, padding=1, field=None)
    with pytest.raises(ValueError, match=r"size=\(8, 8\) is larger than the padded image "
                                         r"\(6, 6\).*smaller size or a larger padding"):
        crop.random_map(np.zeros((4, 4)), rng(0))


@pytest.mark.parametrize("kwargs, error, pattern", [
    ({"size": 3, "padding": -1}, ValueError, r"padding=-1 must be >= 0"),
    ({"size": 0}, ValueError, r"size=0 must be positive"),
    ({"size": (3, 0)}, ValueError, r"size\[1\]=0 must be positive"),
    ({"size": (1, 2, 3)}, TypeError, r"size=\(1, 2, 3\) must be an int or a pair"),
    ({"size": 3, "pad_mode": "mirror"}, ValueError, r"pad_mode='mirror' is not one of"),
    ({"size": 3, "batched": "yes"}, TypeError, r"batched='yes' must be True or False"),
])
def test_crop_rejects_bad_arguments(kwargs, error, pattern):
    with pytest.raises(error, match=pattern):
        RandomCrop(**kwargs)


# --- DecodeImage -------------------------------------------------------------------------


def png_bytes(pixels: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def test_decode_returns_the_original_pixels_and_keeps_other_fields(images):
    record = {"image": png_bytes(images[0]), "label": 4}
    out = DecodeImage().map(record)
    np.testing.assert_array_equal(out["image"], images[0])
    assert out["label"] == 4 and out["image"].flags.writeable


def test_decode_converts_mode(images):
    grey = DecodeImage(field=None, mode="L").map(png_bytes(images[0]))
    assert grey.shape == (6, 5) and grey.dtype == np.uint8


def test_decode_errors_name_the_problem():
    with pytest.raises(ValueError, match=r"cannot decode"):
        DecodeImage().map({"image": b"not an image"})
    with pytest.raises(TypeError, match=r"already an array, remove DecodeImage"):
        DecodeImage().map({"image": np.zeros((2, 2), np.uint8)})
    with pytest.raises(ValueError, match=r"mode='grey' is not a Pillow mode"):
        DecodeImage(mode="grey")


def test_every_augmentation_is_a_grain_style_transform():
    assert isinstance(Normalize(), MapTransform)
    assert isinstance(DecodeImage(), MapTransform)
    assert isinstance(RandomHorizontalFlip(), RandomMapTransform)
    assert isinstance(RandomCrop(2), RandomMapTransform)


def test_random_crop_with_zero_padding_equals_np_pad_then_cut():
    """RandomCrop cuts zero-padded windows without building the padded image; the pixels
    must be those of np.pad followed by the cut, for any size, padding and channel count."""
    from course_lib.augment import RandomCrop

    shapes = np.random.default_rng(0)
    for _ in range(200):
        height, width = (int(n) for n in shapes.integers(1, 12, size=2))
        padding = int(shapes.integers(0, 5))
        channels = () if shapes.random() < 0.5 else (3,)
        image = shapes.integers(0, 255, (height, width, *channels)).astype(np.uint8)
        size = (int(shapes.integers(1, height + 2 * padding + 1)),
                int(shapes.integers(1, width + 2 * padding + 1)))
        seed = int(shapes.integers(1 << 30))
        cut = RandomCrop(size, padding=padding, field=None).random_map(
            image, np.random.default_rng(seed))
        top, left = np.random.default_rng(seed).integers(
            0, [height + 2 * padding - size[0] + 1, width + 2 * padding - size[1] + 1])
        padded = np.pad(image, [(padding, padding)] * 2 + [(0, 0)] * len(channels))
        np.testing.assert_array_equal(cut, padded[top:top + size[0], left:left + size[1]])
        assert cut.dtype == image.dtype
