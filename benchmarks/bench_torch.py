"""The pipelines on torch.utils.data.DataLoader, for comparison.

`build_torch(options, data)` returns `(make_iterator, info)`; see bench_configs.py.
Per-record NumPy normalize and flip in a map-style Dataset, default collate.
"""

from __future__ import annotations

import numpy as np
import torch
from bench_common import BATCH_SIZE, FLIP_P, SEED, normalize_image
from torch.utils.data import DataLoader, Dataset


class NormalizeFlipDataset(Dataset):
    """Record `k`: the normalised image, flipped with probability `FLIP_P`, and its label."""

    def __init__(self, data: dict):
        self.images = data["image"]
        self.labels = data["label"]
        self.rng = np.random.default_rng(SEED)

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> dict:
        image = self.images[index]
        if self.rng.random() < FLIP_P:
            image = image[:, ::-1]
        # Flip first: normalising the flipped view gives the same pixels in a new contiguous
        # array, which default_collate accepts (torch.as_tensor refuses negative strides).
        return {"image": normalize_image(image), "label": int(self.labels[index])}


def _seed_worker(worker_id: int) -> None:
    """Give each worker its own flip stream (forked workers would all share the parent's)."""
    info = torch.utils.data.get_worker_info()
    info.dataset.rng = np.random.default_rng([SEED, worker_id, torch.initial_seed() % 2**32])


def build_torch(options: dict, data: dict):
    workers = options.get("worker_count", 0)
    generator = torch.Generator()
    generator.manual_seed(SEED)
    loader = DataLoader(NormalizeFlipDataset(data), batch_size=BATCH_SIZE, shuffle=True,
                        drop_last=True, num_workers=workers, generator=generator,
                        persistent_workers=False,
                        worker_init_fn=_seed_worker if workers else None)
    info = {
        "transforms": "per-record NumPy normalize + flip in Dataset.__getitem__",
        "collate": "default_collate",
        "num_workers": workers,
        "torch_num_threads": torch.get_num_threads(),
        "multiprocessing_context": "default (fork on Linux)" if workers else None,
    }
    return (lambda: iter(loader)), info


# -- the decode-bound pipeline (bench_decode.py) ------------------------------------------------
class DecodeAugmentDataset(Dataset):
    """Record `k`: its PNG read, decoded, cropped, flipped and normalised (bench_decode)."""

    def __init__(self, directory, num_records: int):
        from bench_decode import PngFolderSource

        self.source = PngFolderSource(directory)
        self.num_records = num_records
        self.rng = np.random.default_rng(SEED)

    def __len__(self) -> int:
        return self.num_records

    def __getitem__(self, index: int) -> dict:
        from bench_decode import process_record

        return process_record(self.source[index], self.rng)


def build_torch_decode(options: dict, data: dict):
    import bench_decode as dec

    workers = options.get("worker_count", 0)
    generator = torch.Generator()
    generator.manual_seed(dec.SEED)
    dataset = DecodeAugmentDataset(data["directory"], data["num_records"])
    loader = DataLoader(dataset, batch_size=dec.BATCH_SIZE, shuffle=True, drop_last=True,
                        num_workers=workers, generator=generator, persistent_workers=False,
                        worker_init_fn=_seed_worker if workers else None)
    info = {
        "source": repr(dataset.source),
        "transforms": "bench_decode.process_record (Pillow decode + crop + flip + normalize) "
                      "in Dataset.__getitem__",
        "collate": "default_collate",
        "num_workers": workers,
        "torch_num_threads": torch.get_num_threads(),
        "multiprocessing_context": "default (fork on Linux)" if workers else None,
    }
    return (lambda: iter(loader)), info


# -- the compute-bound pipeline (bench_compute.py) ----------------------------------------------
class ComputeDataset(Dataset):
    """Record `k`: bench_compute.compute_record of image `k`."""

    def __init__(self, images: np.ndarray):
        self.images = images

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> np.ndarray:
        from bench_compute import compute_record

        return compute_record(self.images[index])


def build_torch_compute(options: dict, data: dict):
    import bench_compute as comp

    workers = options.get("worker_count", 0)
    generator = torch.Generator()
    generator.manual_seed(comp.SEED)
    loader = DataLoader(ComputeDataset(data["image"]), batch_size=comp.BATCH_SIZE,
                        shuffle=True, drop_last=True, num_workers=workers,
                        generator=generator, persistent_workers=False)
    info = {
        "transforms": "bench_compute.compute_record in Dataset.__getitem__",
        "collate": "default_collate",
        "num_workers": workers,
        "torch_num_threads": torch.get_num_threads(),
    }
    return (lambda: iter(loader)), info
