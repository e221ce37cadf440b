"""`checks.check_rotation`: the answer passes, each typical mistake gets its own advice."""

from __future__ import annotations

import random

import matplotlib
import numpy as np
import pytest
from scipy import ndimage

import course_lib as grain
from course_lib import checks

matplotlib.use("Agg")


def rotate_image(image: np.ndarray, degrees: float) -> np.ndarray:
    """The notebook's primitive: float32 out, same shape."""
    return ndimage.rotate(image.astype(np.float32), degrees, reshape=False, order=1,
                          mode="nearest")


class RandomRotation(grain.RandomMapTransform):
    """The answer."""

    def __init__(self, max_degrees: float = 15.0):
        self.max_degrees = max_degrees

    def angle(self, rng: np.random.Generator) -> float:
        return rng.uniform(-self.max_degrees, self.max_degrees)

    def rotate(self, image: np.ndarray, angle: float) -> np.ndarray:
        rotated = rotate_image(image, angle)
        if np.issubdtype(image.dtype, np.integer):
            info = np.iinfo(image.dtype)
            rotated = np.clip(np.rint(rotated), info.min, info.max)
        return rotated.astype(image.dtype)

    def random_map(self, element, rng):
        element["image"] = self.rotate(element["image"], self.angle(rng))
        return element


class PillowRotation(grain.RandomMapTransform):
    """Another right answer: Pillow, channel by channel, rotating about its own centre."""

    def __init__(self, max_degrees: float = 15.0):
        self.max_degrees = max_degrees

    def random_map(self, element, rng):
        from PIL import Image

        image = element["image"]
        angle = float(rng.uniform(-self.max_degrees, self.max_degrees))
        planes = image[..., None] if image.ndim == 2 else image
        rotated = [np.asarray(Image.fromarray(planes[..., channel]).rotate(
            angle, resample=Image.BILINEAR)) for channel in range(planes.shape[-1])]
        out = np.stack(rotated, axis=-1).astype(image.dtype)
        return {**element, "image": out[..., 0] if image.ndim == 2 else out}


class Unsolved(RandomRotation):
    def random_map(self, element, rng):
        raise NotImplementedError("draw the angle from `rng`")


class GlobalNumpy(RandomRotation):
    def angle(self, rng):
        return np.random.uniform(-self.max_degrees, self.max_degrees)


class PythonRandom(RandomRotation):
    def angle(self, rng):
        return random.uniform(-self.max_degrees, self.max_degrees)


class GeneratorFromInit(RandomRotation):
    def __init__(self, max_degrees: float = 15.0):
        super().__init__(max_degrees)
        self.generator = np.random.default_rng(0)

    def angle(self, rng):
        return self.generator.uniform(-self.max_degrees, self.max_degrees)


class UnseededGenerator(RandomRotation):
    def angle(self, rng):
        return np.random.default_rng().uniform(-self.max_degrees, self.max_degrees)


class SeededByLabel(RandomRotation):
    def random_map(self, element, rng):
        own = np.random.default_rng(int(element["label"]))
        element["image"] = self.rotate(element["image"], own.uniform(-15, 15))
        return element


class FixedAngle(RandomRotation):
    def angle(self, rng):
        return self.max_degrees / 2


class NotRotated(RandomRotation):
    def random_map(self, element, rng):
        self.angle(rng)
        return element


class FloatResult(RandomRotation):
    def rotate(self, image, angle):
        return rotate_image(image, angle)


class ResizedFrame(RandomRotation):
    def rotate(self, image, angle):
        return ndimage.rotate(image, angle, reshape=True, order=1)


class RescaledToUnit(RandomRotation):
    def rotate(self, image, angle):  # as skimage.transform.rotate does for integer images
        return (rotate_image(image, angle) / 255).astype(image.dtype)


class LosesLabel(RandomRotation):
    def random_map(self, element, rng):
        return {"image": self.rotate(element["image"], self.angle(rng))}


class ReturnsImage(RandomRotation):
    def random_map(self, element, rng):
        return self.rotate(element["image"], self.angle(rng))


class FixedLimit(RandomRotation):
    def angle(self, rng):
        return rng.uniform(-15.0, 15.0)


class Radians(RandomRotation):
    def angle(self, rng):
        return rng.uniform(-np.radians(self.max_degrees), np.radians(self.max_degrees))


class ConvertedToDegrees(RandomRotation):
    def angle(self, rng):
        return np.degrees(rng.uniform(-self.max_degrees, self.max_degrees))


class OneWay(RandomRotation):
    def angle(self, rng):
        return rng.uniform(0, self.max_degrees)


class Crashes(RandomRotation):
    def angle(self, rng):
        return rng.uniform(-self.max_degrees, self.max_degrees, size=3)[5]


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    import matplotlib.pyplot as plt

    plt.close("all")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("answer", [RandomRotation, PillowRotation])
def test_a_right_answer_passes_and_leaves_the_global_generators_alone(answer, capsys):
    np.random.seed(123)
    random.seed(123)
    expected = np.random.random(), random.random()
    np.random.seed(123)
    random.seed(123)
    checks.check_rotation(answer)
    assert (np.random.random(), random.random()) == expected
    assert capsys.readouterr().out.startswith("\N{CHECK MARK} RandomRotation keeps")


def test_the_unsolved_stub_is_let_through():
    with pytest.raises(NotImplementedError, match="draw the angle"):
        checks.check_rotation(Unsolved)


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("answer", "message"), [
    (GlobalNumpy, r"only the global NumPy seed .* not from np\.random"),
    (PythonRandom, r"only Python's random\.seed changed.* not from the random module"),
    (GeneratorFromInit, r"worker_count=2 gave other rotations than worker_count=0"),
    (UnseededGenerator, r"two runs of the same loader, with the same seed .* gave different "
                        r"rotations.*np\.random\.default_rng\(\) \(no seed\)"),
])
def test_randomness_from_anywhere_but_rng_is_caught_in_a_loader(answer, message):
    with pytest.raises(AssertionError, match=message):
        checks.check_rotation(answer)


@pytest.mark.parametrize(("answer", "message"), [
    (FixedAngle, r"all 32 calls rotated by the same angle \(7\.5°\).*draw a new angle from `rng`"),
    (SeededByLabel, r"all 32 calls rotated by the same angle"),
    (NotRotated, r"came back unrotated in all 32 calls"),
    (FloatResult, r"a uint8 image of shape \(12, 16\) came back as float32.*astype\(image\.dtype"),
    (ResizedFrame, r"of shape \(12, 16(, 3)?\) came back with shape \(\d+, \d+.*reshape=False"),
    (RescaledToUnit, r"brightest pixel is 255 came back with its brightest pixel at [01]\b"),
    (LosesLabel, r"'label' entry is gone"),
    (ReturnsImage, r"random_map returned ndarray, not the element"),
    (FixedLimit, r"RandomRotation\(max_degrees=5\) rotated an image by 1\d\.\d°.*"
                 r"self\.max_degrees"),
    (Radians, r"largest of 32 rotations was 0\.\d\d°.*don't convert the limit to radians"),
    (ConvertedToDegrees, r"RandomRotation\(\) rotated an image by \d+\.\d°, more than "
                         r"max_degrees=15.*np\.degrees"),
    (OneWay, r"all 32 rotations went the same way.*not from \[0, max_degrees\]"),
    (Crashes, r"Crashes\.random_map raised IndexError: index 5 .*\(line \d+: return "),
])
def test_each_typical_mistake_gets_its_own_advice(answer, message):
    with pytest.raises(AssertionError, match=message):
        checks.check_rotation(answer)


def test_the_verdict_is_the_same_when_run_again():
    messages = []
    for _ in range(2):
        with pytest.raises(AssertionError) as error:
            checks.check_rotation(FixedLimit)
        messages.append(str(error.value))
    assert messages[0] == messages[1]
