"""Exercise 1, random rotation: a random transform that draws only from the `rng` it is given.

`check_rotation(RandomRotation)` builds the learner's class and judges it by what it does,
in four steps, each of which stops with its own advice:

1. **The element comes back whole.** `random_map` is called on `(H, W)` and `(H, W, C)`
   images, `uint8` and `float32`: the element must still be a dict with its other entries,
   and the image must keep its shape, its dtype and (for `uint8`) its value range. A
   rotation computed in floating point and not cast back would hand the next transform, or
   `Batch`, a different dtype than the source's.
2. **The angle is what was asked for.** The angle is *measured*, not read from the code: the
   test image holds two bright spots, one per channel, and the direction of the line from
   one spot's centre of mass to the other's turns by exactly the rotation angle, wherever the
   rotation is centred. Over many calls the angles must vary, stay within
   `[-max_degrees, max_degrees]`, reach well into that range on both sides, and follow
   `max_degrees` when another value is passed (a limit typed as `15`, or converted to
   radians, shows here).
3. **Only `rng` decides.** The same images go through a real `DataLoader` several times:
   with the same seed, after changing only NumPy's global seed, after changing only
   Python's `random` seed, with two worker processes, and with another seed. Only the
   last may change the result. This is lesson 3's promise: a record's augmentation depends
   on the seed and the record's position, nothing else.
4. On success it prints one line and shows a few digits as each run rotated them.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator

import numpy as np

from course_lib.checks._verdict import expect, fail, learner_code, passed

__all__ = ["check_rotation"]

DEFAULT_MAX_DEGREES = 15.0
OTHER_LIMITS = (5.0, 40.0)  # passed to the constructor: one below, one above the default
CALLS = 32  # random_map calls per limit; each gets a fresh generator
TOLERANCE = 0.5  # degrees; the spot measurement is good to about 0.05
PROBE_SIDE = 33
SPOT_OFFSET = 10  # pixels from the centre to each spot
LOADER_RECORDS = 128  # two batches of 64: with two workers, each computes one of them
LOADER_BATCH = 64
LOADER_SIDE = 32
SHOWN = 10


# -- the test images -------------------------------------------------------------------------
def _spot_probe(dtype) -> np.ndarray:
    """A (33, 33, 2) image: channel 0 has a spot left of centre, channel 1 one right of it."""
    rows, columns = np.mgrid[0:PROBE_SIDE, 0:PROBE_SIDE]
    centre = (PROBE_SIDE - 1) / 2
    image = np.stack([np.exp(-((rows - centre) ** 2 + (columns - centre - offset) ** 2) / 8.0)
                      for offset in (-SPOT_OFFSET, SPOT_OFFSET)], axis=-1)
    if dtype == np.uint8:
        return np.rint(image * 255).astype(np.uint8)
    return image.astype(dtype)


def _measured_angle(image: np.ndarray) -> float:
    """Degrees (counter-clockwise as displayed) from the spot in channel 0 to that in 1."""
    weights = np.clip(np.asarray(image, dtype=np.float64), 0, None)
    rows, columns = np.mgrid[0:weights.shape[0], 0:weights.shape[1]]
    centres = []
    for channel in range(2):
        mass = weights[..., channel].sum()
        if not mass > 0:
            return float("nan")
        centres.append((np.sum(weights[..., channel] * rows) / mass,
                        np.sum(weights[..., channel] * columns) / mass))
    (row_0, column_0), (row_1, column_1) = centres
    return float(np.degrees(np.arctan2(row_0 - row_1, column_1 - column_0)))


def _shape_cases() -> list[np.ndarray]:
    """(H, W) and (H, W, C) images, uint8 and float32, non-square so axes cannot be mixed."""
    rows, columns = np.mgrid[0:12, 0:16]
    grey = np.rint(255 * np.clip(1 - np.hypot(rows - 5.5, columns - 7.5) / 8, 0, 1))
    colour = np.stack([grey, grey[::-1], grey[:, ::-1]], axis=-1)
    return [grey.astype(np.uint8), colour.astype(np.uint8),
            (grey / 255).astype(np.float32), (colour / 255).astype(np.float32)]


def _describe(image: np.ndarray) -> str:
    return f"a {image.dtype} image of shape {image.shape}"


# -- calling the learner's code --------------------------------------------------------------
def _build(rotation_class: type, *args: float):
    """`RandomRotation()`, or `RandomRotation(max_degrees=args[0])`."""
    call = f"RandomRotation({f'max_degrees={args[0]:g}' if args else ''})"
    with learner_code(call):
        return rotation_class(max_degrees=args[0]) if args else rotation_class()


def _rotated(transform, image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The image `transform.random_map` returns for `{"image": image, "label": 7}`."""
    element = {"image": image.copy(), "label": 7}
    with learner_code(f"{type(transform).__name__}.random_map"):
        result = transform.random_map(element, rng)
    if not isinstance(result, dict) or "image" not in result:
        fail(f"random_map returned {type(result).__name__}"
             f"{' without an image entry' if isinstance(result, dict) else ''}, not the element",
             'put the rotated image back with element["image"] = ... and end with '
             "`return element`")
    expect("label" in result and np.array_equal(result["label"], 7),
           "random_map returned an element whose 'label' entry is gone or changed",
           "change only element['image'] and return the whole element")
    return np.asarray(result["image"])


def _check_shapes_and_dtypes(transform) -> None:
    for number, image in enumerate(_shape_cases()):
        out = _rotated(transform, image, np.random.default_rng([1, number]))
        expect(out.shape == image.shape,
               f"{_describe(image)} came back with shape {out.shape}",
               "keep the image's shape: rotate inside the frame (rotate_image does, with "
               "reshape=False) and rotate all channels together")
        expect(out.dtype == image.dtype,
               f"{_describe(image)} came back as {out.dtype}",
               "rotate_image computes in float32; cast its result back with "
               ".astype(image.dtype) before putting it in the element")
    probe = _spot_probe(np.uint8)
    out = _rotated(transform, probe, np.random.default_rng([1, 99]))
    expect(out.dtype == np.uint8 and int(out.max()) >= int(probe.max()) // 2,
           f"a uint8 image whose brightest pixel is {int(probe.max())} came back with its "
           f"brightest pixel at {int(out.max())}",
           "keep the value range: cast the rotated image with .astype(image.dtype), without "
           "rescaling it to [0, 1] first")


def _angles(transform) -> np.ndarray:
    probe = _spot_probe(np.float32)
    return np.array([_measured_angle(_rotated(transform, probe, np.random.default_rng([2, i])))
                     for i in range(CALLS)])


def _check_angles(transform, max_degrees: float, built_with: str) -> np.ndarray:
    """The angles of `CALLS` calls; fails unless they look drawn from [-max, max]."""
    angles = _angles(transform)
    expect(not np.isnan(angles).any(),
           "the rotated test image came back black (all zeros)",
           "return the rotated image itself; rotate_image keeps the pixel values")
    magnitudes = np.abs(angles)
    expect(magnitudes.max() > 0.01,
           f"the test image came back unrotated in all {CALLS} calls",
           "rotate element['image'] by the angle you draw, e.g. "
           "rotate_image(image, angle), and put the result back in the element")
    expect(np.ptp(angles) > 0.01,
           f"all {CALLS} calls rotated by the same angle ({angles[0]:.1f}°)",
           "draw a new angle from `rng` in every call to random_map, e.g. "
           "rng.uniform(-self.max_degrees, self.max_degrees)")
    largest = float(magnitudes.max())
    if largest > max_degrees + TOLERANCE:
        fix = ("draw the angle in degrees from [-max_degrees, max_degrees]; rotate_image takes "
               "degrees, so don't convert with np.degrees")
        if built_with != "RandomRotation()":
            fix = ("read the limit from self.max_degrees rather than a fixed number, and draw "
                   "in degrees from [-self.max_degrees, self.max_degrees]")
        fail(f"{built_with} rotated an image by {largest:.1f}°, more than max_degrees="
             f"{max_degrees:g}", fix)
    if largest < max_degrees / 2:
        fix = ("draw from the whole range [-max_degrees, max_degrees]; rotate_image takes "
               "degrees, so don't convert the limit to radians")
        if built_with != "RandomRotation()":
            fix = ("read the limit from self.max_degrees rather than a fixed number, and draw "
                   "from the whole range [-self.max_degrees, self.max_degrees]")
        fail(f"with {built_with} the largest of {CALLS} rotations was {largest:.2f}°, far "
             f"below max_degrees={max_degrees:g}", fix)
    expect(angles.min() < -TOLERANCE and angles.max() > TOLERANCE,
           f"all {CALLS} rotations went the same way (between {angles.min():.1f}° and "
           f"{angles.max():.1f}°)",
           "draw from [-max_degrees, max_degrees], e.g. rng.uniform(-self.max_degrees, "
           "self.max_degrees), not from [0, max_degrees]")
    return angles


# -- through a real loader -------------------------------------------------------------------
def _loader_images() -> np.ndarray:
    from course_lib import course

    digits = course.digits()["image"][:LOADER_RECORDS]
    return course.upscale(digits, LOADER_SIDE)


def _one_epoch(rotation_class: type, images: np.ndarray, *, seed: int, worker_count: int,
               numpy_seed: int = 0, python_seed: int = 0) -> np.ndarray:
    """The images of one epoch, after seeding NumPy's and Python's global generators."""
    import course_lib as grain

    source = grain.ArrayDataSource({"image": images,
                                    "label": np.arange(len(images), dtype=np.int32)})
    sampler = grain.IndexSampler(len(source), shuffle=False, num_epochs=1, seed=seed)
    transform = _build(rotation_class)
    loader = grain.DataLoader(data_source=source, sampler=sampler, worker_count=worker_count,
                              operations=[transform, grain.Batch(LOADER_BATCH)])
    np.random.seed(numpy_seed)
    random.seed(python_seed)
    with learner_code(f"a DataLoader running {type(transform).__name__}"), \
            iter(loader) as batches:
        return np.concatenate([np.array(batch["image"]) for batch in batches])


def _check_determinism(rotation_class: type, images: np.ndarray) -> dict[str, np.ndarray]:
    """One epoch per setting; only another loader seed may change the rotated images."""
    runs = {"seed 0, 0 workers": _one_epoch(rotation_class, images, seed=0, worker_count=0)}
    again = _one_epoch(rotation_class, images, seed=0, worker_count=0)
    expect(np.array_equal(runs["seed 0, 0 workers"], again),
           "two runs of the same loader, with the same seed and the same global seeds, gave "
           "different rotations",
           "draw every random number from the `rng` argument inside random_map; a generator "
           "made with np.random.default_rng() (no seed), or kept outside random_map, carries "
           "on from run to run")
    other_numpy = _one_epoch(rotation_class, images, seed=0, worker_count=0, numpy_seed=1)
    expect(np.array_equal(runs["seed 0, 0 workers"], other_numpy),
           "with the same loader seed, the rotations changed when only the global NumPy "
           "seed (np.random.seed) changed",
           "draw the angle from the `rng` argument of random_map, not from np.random")
    other_python = _one_epoch(rotation_class, images, seed=0, worker_count=0,
                              python_seed=1)
    expect(np.array_equal(runs["seed 0, 0 workers"], other_python),
           "with the same loader seed, the rotations changed when only Python's "
           "random.seed changed",
           "draw the angle from the `rng` argument of random_map, not from the random "
           "module")
    runs["seed 0, 2 workers"] = _one_epoch(rotation_class, images, seed=0, worker_count=2)
    expect(np.array_equal(runs["seed 0, 0 workers"], runs["seed 0, 2 workers"]),
           "with the same seed, worker_count=2 gave other rotations than worker_count=0",
           "draw every random number from the `rng` argument inside random_map, and keep "
           "no state between calls")
    runs["seed 1"] = _one_epoch(rotation_class, images, seed=1, worker_count=0)
    expect(not np.array_equal(runs["seed 0, 0 workers"], runs["seed 1"]),
           "seed 1 gave exactly the same rotations as seed 0",
           "draw the angle from the `rng` argument: it is what the seed changes")
    return runs


def _show(images: np.ndarray, runs: dict[str, np.ndarray]) -> None:
    from course_lib.course import determinism

    shown = np.linspace(0, len(images) - 1, SHOWN).round().astype(int)  # from both batches
    determinism.show_image_rows({"the digits": list(images[shown]),
                                 **{name: list(run[shown]) for name, run in runs.items()}},
                                title=f"Your RandomRotation in a DataLoader: {SHOWN} of the "
                                      f"{len(images)} digits of each epoch")


def check_rotation(rotation_class: type) -> None:
    """Check the learner's `RandomRotation` class; see the module docstring for what and why."""
    with _global_generators_kept():
        _check(rotation_class)


@contextlib.contextmanager
def _global_generators_kept() -> Iterator[None]:
    """The check seeds NumPy's and Python's global generators; the learner's stay as they were."""
    numpy_state, python_state = np.random.get_state(), random.getstate()
    try:
        yield
    finally:
        np.random.set_state(numpy_state)
        random.setstate(python_state)


def _check(rotation_class: type) -> None:
    default = _build(rotation_class)
    _check_shapes_and_dtypes(default)
    _check_angles(default, DEFAULT_MAX_DEGREES, "RandomRotation()")
    for limit in OTHER_LIMITS:
        _check_angles(_build(rotation_class, limit), limit,
                      f"RandomRotation(max_degrees={limit:g})")
    images = _loader_images()
    runs = _check_determinism(rotation_class, images)
    passed("RandomRotation keeps shape and dtype, turns by varied angles within "
           "±max_degrees, and only the seed changes them: not NumPy's or Python's global "
           "seed, not the worker count.")
    _show(images, runs)
