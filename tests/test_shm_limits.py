"""Shared memory that cannot crash, leak or grow, whatever the data and the /dev/shm size.

Docker gives a container 64 MB of /dev/shm. The tests that need a small /dev/shm run a
child interpreter in a private mount namespace with its own tmpfs (`unshare -m`, as root),
so what it uses and leaves there is exact and no other process shares it; they are skipped
where that is not possible.
"""

from __future__ import annotations

import collections
import gc
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from segments import existing_segments, record_created_segments

import course_lib
from course_lib import (
    ArrayDataSource,
    Batch,
    DataLoader,
    IndexSampler,
    MapTransform,
    RangeDataSource,
)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="reads /proc/<pid>/maps and /dev/shm (Linux)")


def _can_mount_a_private_tmpfs() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs "
                            "/dev/shm"], capture_output=True, timeout=30)
    return probe.returncode == 0


PRIVATE_TMPFS = _can_mount_a_private_tmpfs()
needs_private_tmpfs = pytest.mark.skipif(
    not PRIVATE_TMPFS, reason="needs root and `unshare -m` to mount a small private /dev/shm")


def _run_with_small_shm(code: str, size_mb: int, timeout: float = 120):
    """Run `code` in a fresh interpreter that sees a private, empty /dev/shm of `size_mb`."""
    script = textwrap.dedent(code)
    command = (f"mount -t tmpfs -o size={size_mb}m tmpfs /dev/shm && "
               f'exec "{sys.executable}" -c "$0"')
    return subprocess.run(["unshare", "-m", "sh", "-c", command, script], capture_output=True,
                          text=True, timeout=timeout, cwd=os.path.dirname(os.path.dirname(
                              os.path.abspath(__file__))))




def _worker_pids() -> list[int]:
    return [process.pid for process in multiprocessing.active_children()
            if process.name.startswith("course_lib-worker")]


def _mapped_segments(pid: int, names) -> set[str]:
    """Which of `names` process `pid` still maps (unlinked ones included)."""
    wanted = {f"/dev/shm/{name}" for name in names}
    with open(f"/proc/{pid}/maps") as maps:
        paths = {line.split(maxsplit=5)[-1].strip() for line in maps if "/dev/shm/" in line}
    return {path.removesuffix(" (deleted)").rsplit("/", 1)[1] for path in paths
            if path.removesuffix(" (deleted)") in wanted}


class WideRecord(MapTransform):
    """4 KB per record: a batch of 64 is 256 KB, enough to need a slot of its own."""

    def map(self, element):
        return np.full(1000, element, np.float32)


def _wide_loader(worker_count: int = 2) -> DataLoader:
    return DataLoader(data_source=RangeDataSource(0, 100_000, 1),
                      sampler=IndexSampler(100_000, num_epochs=1),
                      operations=[WideRecord(), Batch(64)], worker_count=worker_count)


# -- growth while the consumer holds a few batches ------------------------------------------
@pytest.mark.timeout(120)
def test_holding_the_last_batches_keeps_every_process_mapping_a_bounded_number_of_slots(
        monkeypatch):
    """Holding the last eight batches, more than the spare slots, retires a slot per
    unit; each retired slot must be unmapped by the worker once the main process lets go of
    it, or /dev/shm grows by one slot per batch until a worker dies of SIGBUS."""
    created = record_created_segments(monkeypatch)
    held = collections.deque(maxlen=8)
    with iter(_wide_loader()) as iterator:
        for _ in range(150):
            held.append(next(iterator))
        per_worker = [len(_mapped_segments(pid, created)) for pid in _worker_pids()]
        held.clear()
        gc.collect()
        in_main = len(_mapped_segments(os.getpid(), created))
    assert len(per_worker) == 2 and len(created) > 50, "expected slots to be retired"
    cap = 4  # worker_buffer_size=1: two units in flight per worker, two held
    # A worker hears of a retired slot with its next task, and two tasks may wait for it.
    bound = cap + 2
    assert max(per_worker) <= bound, (
        f"workers still map {per_worker} slots after 150 batches (at most {bound} each is "
        f"expected); {len(created)} slots were created in all")
    assert in_main <= 2 * cap, f"the main process maps {in_main} slots once nothing is held"
    assert existing_segments(created) == []


@needs_private_tmpfs
@pytest.mark.timeout(180)
def test_a_long_run_in_a_small_dev_shm_stays_flat_and_finishes():
    """In 16 MB of /dev/shm, 600 batches of 256 KB with the last eight held: the used space
    after 600 batches is what it was after 100, and the run neither dies nor leaks."""
    result = _run_with_small_shm("""
        import collections, os
        import numpy as np
        import course_lib as grain

        class WideRecord(grain.MapTransform):
            def map(self, element):
                return np.full(1000, element, np.float32)

        def used_kb():
            stat = os.statvfs("/dev/shm")
            return (stat.f_blocks - stat.f_bfree) * stat.f_frsize // 1024

        if __name__ == "__main__":
            held, used = collections.deque(maxlen=8), {}
            loader = grain.DataLoader(
                data_source=grain.RangeDataSource(0, 100_000, 1),
                sampler=grain.IndexSampler(100_000, num_epochs=1),
                operations=[WideRecord(), grain.Batch(64)], worker_count=2)
            with iter(loader) as iterator:
                for step in range(1, 601):
                    held.append(next(iterator))
                    if step in (100, 600):
                        used[step] = used_kb()
            held.clear()  # the last batches were views of shared memory until now
            print(used[100], used[600], used_kb(), flush=True)
    """, size_mb=16)
    assert result.returncode == 0, result.stderr[-3000:]
    at_100, at_600, after_close = map(int, result.stdout.split())
    assert at_600 <= at_100 + 1024, f"/dev/shm use grew from {at_100} KB to {at_600} KB"
    assert after_close == 0, f"{after_close} KB left in /dev/shm after close"


@needs_private_tmpfs
@pytest.mark.timeout(180)
def test_batches_larger_than_dev_shm_come_back_through_the_pipe():
    """A 4 MB batch under a 2 MB /dev/shm: the slot cannot be reserved, so the worker sends
    the batch through its pipe instead of dying of SIGBUS while writing it."""
    result = _run_with_small_shm("""
        import os
        import numpy as np
        import course_lib as grain

        class Wide(grain.MapTransform):
            def map(self, element):
                return np.full(16_000, element, np.float32)

        if __name__ == "__main__":
            def loader(workers):
                return grain.DataLoader(
                    data_source=grain.RangeDataSource(0, 640, 1),
                    sampler=grain.IndexSampler(640, shuffle=True, seed=1, num_epochs=1),
                    operations=[Wide(), grain.Batch(64)], worker_count=workers)
            with iter(loader(2)) as iterator:
                got = list(iterator)
            want = list(loader(0))
            assert len(got) == len(want) == 10
            assert all(np.array_equal(a, b) for a, b in zip(got, want)), "batches differ"
            assert got[0].flags.writeable
            print(sorted(os.listdir("/dev/shm")), flush=True)
    """, size_mb=2)
    assert result.returncode == 0, (
        f"exit code {result.returncode}\n{result.stderr[-3000:]}")
    assert result.stdout.strip() == "[]", f"left in /dev/shm: {result.stdout}"
    assert "through a pipe" in result.stderr and "--shm-size" in result.stderr, result.stderr


def test_a_sigbus_death_points_at_shm_size_not_at_worker_buffer_size():
    class Killed:  # what WorkerPool._died reads from a multiprocessing.Process
        exitcode = -signal.SIGBUS

    message = course_lib.workers._describe_exit(Killed())
    assert "--shm-size" in message
    assert "worker_buffer_size" not in message, "lowering worker_buffer_size would not help"


# -- data larger than /dev/shm ----------------------------------------------------------------
@needs_private_tmpfs
@pytest.mark.timeout(180)
def test_an_array_source_larger_than_dev_shm_does_not_kill_the_main_process():
    """150 MB of uint8 under a 64 MB /dev/shm: the arrays are not shared (each worker gets
    its own copy), the batches equal worker_count=0, a note names the sizes and the fix."""
    result = _run_with_small_shm("""
        import os
        import numpy as np
        import course_lib as grain

        if __name__ == "__main__":
            images = np.arange(150 * 2**20, dtype=np.uint64).astype(np.uint8).reshape(-1, 1024)
            def loader(workers):
                return grain.DataLoader(
                    data_source=grain.ArrayDataSource(images),
                    sampler=grain.IndexSampler(len(images), shuffle=True, seed=3, num_epochs=1),
                    operations=[grain.Batch(64)], worker_count=workers)
            with iter(loader(2)) as iterator:
                got = [next(iterator) for _ in range(8)]
            with iter(loader(0)) as iterator:
                want = [next(iterator) for _ in range(8)]
            assert all(np.array_equal(a, b) for a, b in zip(got, want)), "batches differ"
            print(sorted(os.listdir("/dev/shm")), flush=True)
    """, size_mb=64)
    assert result.returncode == 0, (
        f"exit code {result.returncode} (135 or -7 is a bus error)\n{result.stderr[-3000:]}")
    assert result.stdout.strip() == "[]", f"left in /dev/shm: {result.stdout}"
    assert "--shm-size" in result.stderr and "MB" in result.stderr, result.stderr


@needs_private_tmpfs
@pytest.mark.timeout(180)
def test_a_full_dev_shm_found_only_while_copying_falls_back_and_leaves_nothing():
    """The free space is checked before copying, but /dev/shm can fill up meanwhile (or not
    say how full it is): the copy then fails with ENOSPC, not a bus error, the array is
    pickled instead, and the half-written segment is gone."""
    result = _run_with_small_shm("""
        import os
        import numpy as np
        import course_lib as grain
        from course_lib import shared_arrays

        if __name__ == "__main__":
            shared_arrays.shared_memory_free_bytes = lambda: None  # blind to the space left
            images = np.arange(80 * 2**20, dtype=np.uint64).astype(np.uint8).reshape(-1, 1024)
            loader = grain.DataLoader(
                data_source=grain.ArrayDataSource(images),
                sampler=grain.IndexSampler(len(images), shuffle=True, seed=3, num_epochs=1),
                operations=[grain.Batch(64)], worker_count=2)
            with iter(loader) as iterator:
                got = [next(iterator) for _ in range(4)]
            keys = loader.sampler.record_keys(0, 256)
            assert np.array_equal(np.concatenate(got), images[keys]), "batches differ"
            print(sorted(os.listdir("/dev/shm")), flush=True)
    """, size_mb=64)
    assert result.returncode == 0, (
        f"exit code {result.returncode} (135 or -7 is a bus error)\n{result.stderr[-3000:]}")
    assert result.stdout.strip() == "[]", f"left in /dev/shm: {result.stdout}"
    assert "--shm-size" in result.stderr, result.stderr


# -- arrays that must not be copied into shared memory as raw bytes --------------------------
def _both_ways(source, operations=()) -> tuple[list, list]:
    def run(workers):
        loader = DataLoader(data_source=source, sampler=IndexSampler(len(source), num_epochs=1),
                            operations=list(operations), worker_count=workers)
        with iter(loader) as iterator:
            return list(iterator)
    return run(2), run(0)


@pytest.mark.timeout(60)
def test_an_object_array_source_works_with_workers(monkeypatch):
    """Object arrays hold pointers into the main process: sharing their bytes made every
    worker segfault. They are pickled instead."""
    created = record_created_segments(monkeypatch)
    captions = np.array([f"caption number {i} " * (i % 7 + 1) for i in range(50_000)],
                        dtype=object)
    got, want = _both_ways(ArrayDataSource(captions))
    assert got == want and got[123] == captions[123]
    assert existing_segments(created) == []


@pytest.mark.timeout(60)
def test_a_structured_array_source_works_with_workers_and_leaves_no_segment(monkeypatch,
                                                                          assert_same):
    created = record_created_segments(monkeypatch)
    records = np.zeros(5000, [("image", "u1", (28, 28)), ("label", "<i8")])
    records["image"] = np.arange(5000 * 784).reshape(5000, 28, 28) % 251
    records["label"] = np.arange(5000) % 10
    assert records.nbytes > 2**20  # large enough to be shared
    got, want = _both_ways(ArrayDataSource(records), [Batch(100)])
    assert got[0].dtype == records.dtype
    assert_same(got, want)
    assert existing_segments(created) == []


@pytest.mark.timeout(60)
def test_a_payload_that_fails_to_pickle_leaves_no_segment(monkeypatch):
    """Arrays already copied into shared memory are unlinked when a later part of the
    pipeline cannot be pickled."""
    import threading

    created = record_created_segments(monkeypatch)

    class LockedSource:
        def __init__(self):
            self.images = np.ones((4096, 1024), np.uint8)  # shared before the lock is met
            self.lock = threading.Lock()

        def __len__(self):
            return len(self.images)

        def __getitem__(self, key):
            return self.images[key]

    loader = DataLoader(data_source=LockedSource(), sampler=IndexSampler(4096, num_epochs=1),
                        worker_count=2)
    with pytest.raises(TypeError, match="cannot be pickled"):
        iter(loader)
    assert [name for name in created if "_data" in name], "the images were never shared"
    assert existing_segments(created) == []


@pytest.mark.timeout(60)
def test_a_memory_mapped_array_travels_as_its_file(tmp_path, monkeypatch, assert_same):
    """`np.load(mmap_mode="r")` data is mapped by the workers from its file, never copied
    into /dev/shm."""
    created = record_created_segments(monkeypatch)
    path = tmp_path / "images.npy"
    np.save(path, np.arange(4096 * 1024, dtype=np.uint32).reshape(4096, 1024) % 65521)
    images = np.load(path, mmap_mode="r")
    loader = DataLoader(data_source=ArrayDataSource(images),
                        sampler=IndexSampler(len(images), shuffle=True, seed=1, num_epochs=1),
                        operations=[Batch(32)], worker_count=2)
    with iter(loader) as iterator:
        got = [next(iterator) for _ in range(4)]
        with open(f"/proc/{_worker_pids()[0]}/maps") as maps:
            mapped_by_worker = str(path) in maps.read()
        copied = [name for name in existing_segments(created)
                  if os.path.getsize(f"/dev/shm/{name}") >= images.nbytes]
    assert mapped_by_worker, "the worker does not map the .npy file itself"
    assert copied == [], f"the mapped array was copied into /dev/shm: {copied}"
    keys = loader.sampler.record_keys(0, 128)
    assert_same(np.concatenate(got), np.asarray(images)[keys])
