"""The checks of exercise 6 (a lazy file source): the answer passes, typical mistakes don't.

The learner's classes are built inside functions, so that cloudpickle ships them to worker
processes by value, as it ships a notebook's.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import course_lib as grain
from course_lib import checks
from course_lib.image_folder import write_image_folder


def _classes(*, getitem: str = "lazy", init: str = "lazy", label: str = "int",
             decode: str = "array"):
    """(LazyImageSource, Decode), right unless a keyword names a mistake."""

    class LazyImageSource(grain.RandomAccessDataSource):
        def __init__(self, directory):
            self.directory = Path(directory)
            manifest = json.loads((self.directory / "manifest.json").read_text())
            self.count = manifest["count"]
            self.pattern = "{:0" + str(manifest["digits"]) + "d}" + manifest["extension"]
            self.labels = np.load(self.directory / manifest["labels"])
            if label == "sorted":
                self.labels = np.sort(self.labels)
            self.names = [self.pattern.format(index) for index in range(self.count)]
            if init == "shuffled":  # the order os.listdir might give
                np.random.default_rng(1).shuffle(self.names)
            if init == "eager":
                self.data = [(self.directory / name).read_bytes() for name in self.names]
            if init == "open_file":
                self.labels_file = open(self.directory / "labels.npy", "rb")  # noqa: SIM115

        def __len__(self):
            if init == "listdir":
                return len(list(self.directory.iterdir()))
            return self.count

        def __getitem__(self, index):
            path = self.directory / self.names[index]
            data = self.data[index] if init == "eager" else path.read_bytes()
            if getitem == "decode":
                data = np.asarray(Image.open(io.BytesIO(data)))
            value = self.labels[index]  # a NumPy int64
            if label == "array":
                value = np.array([value])
            elif label != "numpy":
                value = int(value)
            return {"image": data, "label": value}

    class Decode(grain.MapTransform):
        def map(self, element):
            picture = Image.open(io.BytesIO(element["image"]))
            if decode == "pil":
                return {**element, "image": picture}
            if decode == "float":
                return {**element, "image": np.asarray(picture, dtype=np.float32) / 255}
            if decode == "rgb":
                return {**element, "image": np.asarray(picture.convert("RGB"))}
            if decode == "no_label":
                return {"image": np.asarray(picture)}
            return {**element, "image": np.asarray(picture)}

    return LazyImageSource, Decode


def test_the_answer_passes_the_source_check(capsys):
    source, _ = _classes()
    checks.check_lazy_source(source)
    assert capsys.readouterr().out.startswith("\N{CHECK MARK} LazyImageSource: 12 records")


@pytest.mark.timeout(120)
def test_the_answer_passes_the_decode_check(capsys):
    checks.check_decode(*_classes())
    assert "worker_count=0 and 2" in capsys.readouterr().out


def test_the_cost_report_runs_on_a_real_folder(tmp_path, capsys):
    rng = np.random.default_rng(0)
    write_image_folder(rng.integers(0, 256, (20, 64, 64), dtype=np.uint8),
                       np.arange(20), tmp_path / "folder")
    checks.check_lazy_costs(*_classes(), tmp_path / "folder")
    out = capsys.readouterr().out
    assert "An eager source would decode all 20 images" in out
    assert "\N{CHECK MARK} LazyImageSource reads a record in" in out


@pytest.mark.parametrize(("mistake", "message"), [
    ({"getitem": "decode"}, r"source\[0\] decoded the image: Pillow's Image.open .* Decode "
                            r"transform of part 2"),
    ({"init": "eager"}, r"opened 12 of the 12 image files in __init__: that is an eager "
                        r"source.*read only manifest.json and labels.npy"),
    ({"label": "numpy"}, r"\['label'\] is a numpy.int64 scalar, not a Python int.*"
                         r"int\(self.labels\[index\]\)"),
    ({"label": "array"}, r"numpy.ndarray of shape \(1,\).*labels of shape \(batch, 1\)"),
    ({"label": "sorted"}, r"source\[0\]\['label'\] is 0, but labels.npy holds 3 for record 0 "
                          r"\(000000.png\).*without sorting"),
    ({"init": "shuffled"}, r"source\[0\]\['image'\] holds the bytes of 0000\d\d.png, not of "
                           r"000000.png.*f'\{index:06d\}.png'"),
    ({"init": "listdir"}, r"len\(source\) is 14, but the folder holds 12 images.*manifest's "
                          r"'count'"),
    ({"init": "open_file"}, r"LazyImageSource could not be pickled \(TypeError: cannot pickle "
                            r"'_io.BufferedReader'.*open each image file inside __getitem__"),
])
def test_a_wrong_source_is_rejected_with_its_reason(mistake, message):
    source, _ = _classes(**mistake)
    with pytest.raises(AssertionError, match=message):
        checks.check_lazy_source(source)


@pytest.mark.parametrize(("mistake", "message"), [
    ({"decode": "pil"}, r"is a PIL.Image.Image, not a NumPy array.*np.asarray\(Image.open"),
    ({"decode": "float"}, r"has dtype float32; the file holds uint8 pixels.*grain.Normalize"),
    ({"decode": "rgb"}, r"has shape \(12, 20, 3\), but the image in the file is \(12, 20\)"),
    ({"decode": "no_label"}, r"Decode\(\).map\(element\) dropped the 'label'.*\*\*element"),
])
def test_a_wrong_decode_is_rejected_with_its_reason(mistake, message):
    with pytest.raises(AssertionError, match=message):
        checks.check_decode(*_classes(**mistake))


def test_a_source_that_cannot_be_pickled_fails_the_decode_check_too():
    with pytest.raises(AssertionError, match=r"cannot send it to its worker processes.*"
                                             r"inside __getitem__"):
        checks.check_decode(*_classes(init="open_file"))


def test_a_decoding_source_is_named_by_the_decode_check_too():
    # Otherwise Decode would be handed pixels instead of bytes and fail in the pipeline.
    with pytest.raises(AssertionError, match=r"source\[0\] decoded the image"):
        checks.check_decode(*_classes(getitem="decode"))


def test_the_stubs_are_let_through_as_not_implemented():
    class LazyImageSource(grain.RandomAccessDataSource):
        def __init__(self, directory):
            raise NotImplementedError("read manifest.json and labels.npy")

    class Decode(grain.MapTransform):
        def map(self, element):
            raise NotImplementedError("decode element['image']")

    with pytest.raises(NotImplementedError, match="manifest"):
        checks.check_lazy_source(LazyImageSource)
    with pytest.raises(NotImplementedError, match="decode"):
        checks.check_decode(_classes()[0], Decode)
    with pytest.raises(NotImplementedError, match="manifest"):
        checks.check_lazy_costs(LazyImageSource, Decode, ".")
