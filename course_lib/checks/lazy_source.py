"""Exercise 6, a lazy file source: `__getitem__` reads bytes, a transform decodes them.

Reading an encoded image from disk is cheap; decoding it is the expensive part (lesson 1).
A source that decodes in `__getitem__`, or reads every file up front in `__init__`, puts that
cost where the loader cannot spread it: in the process that builds the source, before the
first batch. A lazy source keeps the folder's path and the labels, hands out each file's
bytes as they are, and leaves decoding to a `MapTransform`, which the loader runs in its
worker processes.

The checks write their own small folder (known images and labels, in the layout of
`course_lib.image_folder`) to a temporary directory and run the learner's classes over it:

- While `__init__` runs, every file opened is recorded (the built-in `open`, `io.open` and
  `os.open` are watched, which covers `Path.read_bytes`, `np.load` and Pillow). Opening the
  manifest and the labels is expected; opening most of the images is the eager mistake.
- While `__getitem__` runs, Pillow's `Image.open` and its decoders are watched: a call means
  the source decodes. The record must be `{"image": bytes, "label": int}`, the bytes equal to
  the file's and the label equal to `labels.npy` at that index.
- The source must survive a pickle round trip, since that is how the loader sends it to its
  workers (with cloudpickle, which copies classes defined in a notebook by value). An open
  file kept on `self` is the usual reason it cannot.
- `Decode` must turn the bytes into the file's uint8 pixels, a NumPy array of the image's
  shape, and keep the label; the whole pipeline (source, `Decode`, `Batch`, `DataLoader`)
  must give the eagerly decoded images, with `worker_count=0` and with 2 workers.
"""

from __future__ import annotations

import builtins
import contextlib
import io
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from course_lib.checks._verdict import expect, fail, learner_code, passed

__all__ = ["check_decode", "check_lazy_costs", "check_lazy_source"]

# The check's folder: a few small grey images, not square (a transposed image is caught),
# and labels out of order (sorted or shuffled labels are caught).
NUM_IMAGES = 12
IMAGE_SHAPE = (12, 20)
LABELS = (3, 7, 1, 9, 0, 4, 8, 2, 6, 5, 7, 1)
MAX_IMAGES_OPENED_IN_INIT = 2
WORKER_COUNTS = (0, 2)
PICKLE_FIX = ("keep only small, plain things on self in __init__ (the folder's path, the "
              "count, the labels array) and open each image file inside __getitem__, e.g. "
              "with Path.read_bytes() or `with open(path, 'rb') as file:`, so that nothing is "
              "left open")


def _known_images() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(6)
    images = rng.integers(0, 256, size=(NUM_IMAGES, *IMAGE_SHAPE), dtype=np.uint8)
    return images, np.array(LABELS, dtype=np.int64)


@contextlib.contextmanager
def _check_folder() -> Iterator[tuple[Path, np.ndarray, np.ndarray, list[Path]]]:
    """A fresh image folder in a temporary directory: (folder, images, labels, files)."""
    from course_lib.image_folder import write_image_folder

    images, labels = _known_images()
    with tempfile.TemporaryDirectory(prefix="lazy-source-check-") as directory:
        folder = write_image_folder(images, labels, Path(directory) / "images")
        files = sorted(folder.glob("*.png"))
        yield folder, images, labels, files


class _Watch:
    """What happened while it was active: files opened, and Pillow decodes started."""

    def __init__(self):
        self.opened: list[str] = []
        self.decodes = 0

    def opened_among(self, files: list[Path]) -> list[str]:
        wanted = {os.path.realpath(path) for path in files}
        return sorted({path for path in self.opened if os.path.realpath(path) in wanted})


def _path_of(file: Any) -> str | None:
    if isinstance(file, str | bytes | os.PathLike):
        path = os.fsdecode(os.fspath(file))
        return os.path.abspath(path)
    return None  # a file descriptor or a file object: not a new file


@contextlib.contextmanager
def _watching() -> Iterator[_Watch]:
    """Record the files opened and the Pillow decodes started while the block runs."""
    from PIL import Image, ImageFile

    watch = _Watch()
    saved_open, saved_io_open, saved_os_open = builtins.open, io.open, os.open
    saved_image_open = Image.open
    saved_loads = {cls: cls.__dict__["load"] for cls in (Image.Image, ImageFile.ImageFile)}

    def recording_open(file, *args, **kwargs):
        path = _path_of(file)
        if path is not None:
            watch.opened.append(path)
        return saved_open(file, *args, **kwargs)

    def recording_os_open(path, *args, **kwargs):
        found = _path_of(path)
        if found is not None:
            watch.opened.append(found)
        return saved_os_open(path, *args, **kwargs)

    def counting_image_open(*args, **kwargs):
        watch.decodes += 1
        return saved_image_open(*args, **kwargs)

    def counting_load(original):
        def load(self, *args, **kwargs):
            watch.decodes += 1
            return original(self, *args, **kwargs)
        return load

    builtins.open = io.open = recording_open
    os.open = recording_os_open
    Image.open = counting_image_open
    for cls, original in saved_loads.items():
        cls.load = counting_load(original)
    try:
        yield watch
    finally:
        builtins.open, io.open, os.open = saved_open, saved_io_open, saved_os_open
        Image.open = saved_image_open
        for cls, original in saved_loads.items():
            cls.load = original


def _describe(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"a numpy.ndarray of shape {value.shape} and dtype {value.dtype}"
    if isinstance(value, np.generic):
        return f"a numpy.{type(value).__name__} scalar"
    return f"a {type(value).__module__}.{type(value).__qualname__}".replace("a builtins.", "a ")


def _build_source(LazyImageSource: type, folder: Path) -> Any:
    with learner_code("LazyImageSource(directory)"):
        return LazyImageSource(folder)


def _check_pickles(thing: Any, name: str, fix: str) -> Any:
    """`thing` after a cloudpickle round trip, as the loader sends it to a worker."""
    import cloudpickle

    try:
        payload = cloudpickle.dumps(thing)
    except Exception as error:
        fail(f"{name} could not be pickled ({type(error).__name__}: {error}), so the loader "
             "cannot send it to its worker processes", fix)
    with learner_code(f"unpickling {name}"):
        return cloudpickle.loads(payload)


def _check_record(source: Any, index: int, files: list[Path], labels: np.ndarray,
                  what: str = "source") -> None:
    """One record of the learner's source: bytes of the right file, an int label, no
    decoding."""
    with _watching() as watch, learner_code(f"{what}[{index}]"):
        record = source[index]
    name = files[index].name
    expect(watch.decodes == 0,
           f"{what}[{index}] decoded the image: Pillow's Image.open (or its decoder) ran "
           f"{watch.decodes} time{'' if watch.decodes == 1 else 's'} inside __getitem__",
           "return the file's bytes as they are, {'image': path.read_bytes(), 'label': ...}, "
           "and leave decoding to the Decode transform of part 2, which the loader runs in "
           "its workers")
    expect(isinstance(record, dict),
           f"{what}[{index}] returned {_describe(record)}, not a dict",
           "return {'image': <the file's bytes>, 'label': <int>}")
    expect(set(record) == {"image", "label"},
           f"{what}[{index}] returned a dict with keys {sorted(record, key=str)}, not "
           "['image', 'label']", "return exactly {'image': data, 'label': label}")
    data = record["image"]
    expect(isinstance(data, bytes),
           f"{what}[{index}]['image'] is {_describe(data)}, not bytes",
           "return the file's encoded bytes unchanged: Path(path).read_bytes() (or "
           "open(path, 'rb').read()); decoding them is Decode's job")
    contents = [path.read_bytes() for path in files]
    if data != contents[index]:
        same = [path.name for path, content in zip(files, contents, strict=True)
                if content == data]
        if same:
            fail(f"{what}[{index}]['image'] holds the bytes of {same[0]}, not of {name}: "
                 f"record {index} must be the file numbered {index}",
                 "build the file name from the index, e.g. f'{index:06d}.png' (the "
                 "manifest's 'digits' and 'extension' give its width and ending), or sort "
                 "the names before indexing them")
        fail(f"{what}[{index}]['image'] is {len(data)} bytes that are not those of {name} "
             f"({len(contents[index])} bytes)",
             "read the whole file in binary mode, unchanged: Path(path).read_bytes()")
    label = record["label"]
    expect(type(label) is int,
           f"{what}[{index}]['label'] is {_describe(label)}, not a Python int",
           "convert the label as you return it: int(self.labels[index]) (a NumPy value "
           "would still batch, but an array of shape (1,) gives labels of shape (batch, 1), "
           "and the layout's contract, like grain.ImageFolderDataSource's, is a plain int)")
    expect(label == int(labels[index]),
           f"{what}[{index}]['label'] is {label}, but labels.npy holds {int(labels[index])} "
           f"for record {index} ({name}); labels.npy is {labels.tolist()}",
           "take the label at the same index from labels.npy, in the order it is stored: "
           "int(self.labels[index]), without sorting or reordering the labels")


def check_lazy_source(LazyImageSource: type) -> None:
    """Build the learner's source over a fresh folder and check that it is lazy (no image
    read in `__init__`, no decoding in `__getitem__`), right (bytes, labels, length) and
    picklable."""
    with _check_folder() as (folder, _, labels, files):
        with _watching() as watch:
            source = _build_source(LazyImageSource, folder)
        opened = watch.opened_among(files)
        expect(len(opened) <= MAX_IMAGES_OPENED_IN_INIT,
               f"LazyImageSource(directory) opened {len(opened)} of the {len(files)} image "
               "files in __init__: that is an eager source, which reads (or decodes) the "
               "whole data set before the first batch and holds it in memory",
               "in __init__ read only manifest.json and labels.npy and keep the folder's "
               "path; read an image's bytes in __getitem__, when the loader asks for it")
        expect(watch.decodes == 0,
               f"LazyImageSource(directory) decoded {watch.decodes} image(s) in __init__",
               "decode nothing in the source: Decode (part 2) does it, record by record")
        with learner_code("len(source)"):
            length = len(source)
        expect(length == len(files),
               f"len(source) is {length}, but the folder holds {len(files)} images (and "
               "manifest.json and labels.npy besides)",
               "return the manifest's 'count' (or len(labels)), not the number of files in "
               "the folder")
        for index in range(len(files)):
            _check_record(source, index, files, labels)
        copy = _check_pickles(source, "LazyImageSource", PICKLE_FIX)
        _check_record(copy, len(files) - 1, files, labels, what="the unpickled source")
    passed(f"LazyImageSource: {length} records in file order; __getitem__ returns the file's "
           f"bytes and an int label without decoding; __init__ opened {len(opened)} of the "
           f"{length} images; the source pickles, so workers can use it")


# -- part 2: decoding, and the whole pipeline ---------------------------------------------
def _check_pixels(pixels: Any, expected: np.ndarray, where: str) -> None:
    from PIL import Image

    if isinstance(pixels, Image.Image):
        fail(f"{where} is a PIL.Image.Image, not a NumPy array: Batch cannot stack Pillow "
             "images into one array",
             "turn it into an array: np.asarray(Image.open(io.BytesIO(data)))")
    expect(isinstance(pixels, np.ndarray),
           f"{where} is {_describe(pixels)}, not a NumPy array",
           "return the decoded pixels as an array: np.asarray(Image.open(io.BytesIO(data)))")
    expect(pixels.dtype == np.uint8,
           f"{where} has dtype {pixels.dtype}; the file holds uint8 pixels",
           "keep the decoded uint8 values (np.asarray of the Pillow image); scaling to "
           "floats belongs to a later transform such as grain.Normalize")
    expect(pixels.shape == expected.shape,
           f"{where} has shape {pixels.shape}, but the image in the file is {expected.shape} "
           "(height, width; grey, so no channel axis)",
           "do not convert, transpose or resize: np.asarray(Image.open(io.BytesIO(data))) "
           "keeps the file's own shape and mode")
    expect(np.array_equal(pixels, expected),
           f"{where} has the right shape and dtype but different pixels from the file "
           f"({int(np.count_nonzero(pixels != expected))} of {expected.size} differ)",
           "decode the bytes without changing them: np.asarray(Image.open(io.BytesIO(data)))")


def _pipeline_output(source: Any, decode: Any, worker_count: int,
                     num_records: int) -> tuple[np.ndarray, np.ndarray]:
    from course_lib.loader import DataLoader
    from course_lib.sampler import IndexSampler
    from course_lib.transforms import Batch

    loader = DataLoader(data_source=source, operations=[decode, Batch(4)],
                        sampler=IndexSampler(num_records, shuffle=False, num_epochs=1),
                        worker_count=worker_count)
    what = (f"DataLoader(data_source=LazyImageSource(...), operations=[Decode(), Batch(4)], "
            f"worker_count={worker_count})")
    with learner_code(what), iter(loader) as iterator:
        batches = list(iterator)
    expect(all(isinstance(batch, dict) and {"image", "label"} <= set(batch)
               for batch in batches),
           f"the batches of {what} are not dicts with 'image' and 'label'",
           "keep both keys: the source returns {'image': ..., 'label': ...} and Decode "
           "returns {**element, 'image': pixels}")
    return (np.concatenate([batch["image"] for batch in batches]),
            np.concatenate([batch["label"] for batch in batches]))


def check_decode(LazyImageSource: type, Decode: type) -> None:
    """Check `Decode` on records of course_lib's own source, then run the learner's source
    and `Decode` through `Batch` and a `DataLoader`, with and without workers, and compare
    with the images written."""
    from course_lib.image_folder import ImageFolderDataSource

    with _check_folder() as (folder, images, labels, files):
        with learner_code("Decode()"):
            decode = Decode()
        reference = ImageFolderDataSource(folder)
        for index in range(len(files)):
            record = reference[index]
            with learner_code("Decode().map(element)"):
                element = decode.map(dict(record))
            where = f"Decode().map(element)['image'] for {files[index].name}"
            expect(isinstance(element, dict),
                   f"Decode().map(element) returned {_describe(element)}, not a dict",
                   "return the element with its image decoded: {**element, 'image': pixels}")
            expect("label" in element and element["label"] == record["label"],
                   "Decode().map(element) "
                   + ("dropped the 'label'" if "label" not in element
                      else f"changed the label from {record['label']} to {element['label']}"),
                   "keep everything else in the element: return {**element, 'image': pixels}")
            expect("image" in element, "Decode().map(element) returned no 'image'",
                   "return {**element, 'image': pixels}")
            _check_pixels(element["image"], images[index], where)
        source = _build_source(LazyImageSource, folder)
        _check_record(source, 0, files, labels)  # a decoding source would fail below
        _check_pickles(source, "LazyImageSource", PICKLE_FIX)
        _check_pickles(decode, "Decode()", "keep no open files, locks or Pillow images on "
                       "self: Decode needs no state, only its map method")
        for worker_count in WORKER_COUNTS:
            got_images, got_labels = _pipeline_output(source, decode, worker_count,
                                                      len(files))
            where = f"with worker_count={worker_count}"
            expect(len(got_images) == len(images),
                   f"the pipeline {where} gave {len(got_images)} images, but the folder "
                   f"holds {len(images)}", "check len(source) (part 1)")
            for index in range(len(images)):
                _check_pixels(got_images[index], images[index],
                              f"image {index} of the pipeline {where}")
            expect(np.array_equal(got_labels, labels),
                   f"the labels of the pipeline {where} are {got_labels.tolist()}, but "
                   f"labels.npy holds {labels.tolist()}", "return int(self.labels[index]) "
                   "from __getitem__ and keep the label in Decode")
    passed(f"Decode gives the files' uint8 pixels, and LazyImageSource + Decode + Batch "
           f"give the {len(images)} images and labels as decoded eagerly, with worker_count="
           + " and ".join(str(count) for count in WORKER_COUNTS))


# -- part 3: what laziness buys -----------------------------------------------------------
def check_lazy_costs(LazyImageSource: type, Decode: type, directory: str | Path) -> None:
    """Time the learner's `__getitem__` against its `Decode` on a real image folder, say
    what an eager source would cost from those numbers, and draw the two costs."""
    import statistics

    import cloudpickle

    from course_lib.checks.worker_benchmark import _show
    from course_lib.course.basics import bar_chart, choose, format_seconds, run_times
    from course_lib.course.table import compare

    source = _build_source(LazyImageSource, Path(directory))
    with learner_code("Decode()"):
        decode = Decode()
    with learner_code("len(source)"):
        length = len(source)
    count = min(length, choose(fast=64, full=512))
    expect(count > 0, f"len(source) is {length}", "point it at a folder with images")
    keys = list(range(count))
    with learner_code("source[index]"):
        records = [source[key] for key in keys]
        read_runs = [seconds / count for seconds in
                     run_times(lambda: [source[key] for key in keys], repeats=5)]
    with learner_code("Decode().map(element)"):
        decoded = [decode.map(dict(record)) for record in records]
        decode_runs = [seconds / count for seconds in
                       run_times(lambda: [decode.map(dict(record)) for record in records],
                                 repeats=5, warmup=0)]
    read_s, decode_s = statistics.median(read_runs), statistics.median(decode_runs)
    for element in decoded[:1]:
        expect(isinstance(element, dict) and isinstance(element.get("image"), np.ndarray),
               "Decode().map(element) did not return a dict with a NumPy 'image'",
               "run checks.check_decode(LazyImageSource, Decode) above and fix what it says")
    pixels_mb = sum(element["image"].nbytes for element in decoded) / count * length / 1e6
    pickled_kb = len(cloudpickle.dumps(source)) / 1e3
    figure = bar_chart({"__getitem__\n(read the bytes)": 1e6 * read_s,
                        "Decode\n(bytes to pixels)": 1e6 * decode_s},
                       ylabel="µs per record", title=f"One record of {Path(directory).name}",
                       value_format="{:.0f}")
    _show(figure)
    print(f"Per record, over {count} records, 5 runs each:")
    print(compare({"__getitem__": read_runs, "Decode": decode_runs}, baseline="__getitem__"))
    print(f"An eager source would decode all {length} images in __init__: from these numbers "
          f"about {format_seconds(length * decode_s)} in one process before the first batch, "
          f"and {pixels_mb:.1f} MB of pixels held in memory.")
    print(f"Your lazy source pickles to {pickled_kb:.1f} kB: that is its share of what the "
          "loader sends to each worker, and the decoding happens there, in parallel.")
    passed(f"LazyImageSource reads a record in {format_seconds(read_s)}; Decode, which the "
           f"workers run, takes {format_seconds(decode_s)}")
