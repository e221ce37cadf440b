"""One Orbax checkpoint holds the model, the optimizer and the data position."""

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parent / "scripts" / "train_and_resume.py"
TOTAL_STEPS = 9


def _run(*args) -> list[dict]:
    completed = subprocess.run([sys.executable, str(SCRIPT), *map(str, args)],
                               capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0, completed.stderr[-3000:]
    return [json.loads(line) for line in completed.stdout.splitlines() if line.startswith("{")]


def _steps(rows: list[dict]) -> list[dict]:
    return [row for row in rows if "step" in row]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> list[dict]:
    """The reference: every step in one process, no checkpoint, no prefetch."""
    return _run(tmp_path_factory.mktemp("uninterrupted"), TOTAL_STEPS, "run")


@pytest.mark.timeout(240)
def test_restore_in_fresh_process_continues_batches_and_losses_exactly(tmp_path, uninterrupted):
    save_at = random.Random().randint(1, TOTAL_STEPS - 1)
    before = _run(tmp_path / "b", TOTAL_STEPS, "save-at", save_at)
    after = _run(tmp_path / "b", TOTAL_STEPS, "resume")

    assert [row["step"] for row in before] == list(range(save_at))
    assert [row["step"] for row in after] == list(range(save_at, TOTAL_STEPS)), (
        f"saved at step {save_at}, the resumed run must continue from there")
    assert before + after == uninterrupted, f"resume after step {save_at} diverged"
    state_file = tmp_path / "b" / str(save_at) / "data" / "process_0-of-1.json"
    assert json.loads(state_file.read_text())["next_index"] == 32 * save_at


def test_iterator_state_works_without_orbax():
    import course_lib as grain

    loader = grain.load(grain.RangeDataSource(0, 50, 1), shuffle=True, seed=1, batch_size=4)
    iterator = iter(loader)
    next(iterator)
    state = iterator.get_state()
    expected = next(iterator)
    fresh = iter(loader)
    fresh.set_state(json.loads(state))
    assert next(fresh).tolist() == expected.tolist()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("worker_count", [0, 2])
def test_restore_with_prefetch_continues_exactly_and_saves_the_consumed_position(
        tmp_path, uninterrupted, worker_count):
    save_at = 4
    options = ("--prefetch", "--worker-count", worker_count)
    before = _run(tmp_path / "b", TOTAL_STEPS, "save-at", save_at, *options)
    after = _run(tmp_path / "b", TOTAL_STEPS, "resume", *options)

    assert [row["step"] for row in _steps(after)] == list(range(save_at, TOTAL_STEPS))
    assert _steps(before) + _steps(after) == uninterrupted, (
        f"resume with prefetch and worker_count={worker_count} diverged")
    state_file = tmp_path / "b" / str(save_at) / "data" / "process_0-of-1.json"
    saved = json.loads(state_file.read_text())["next_index"]
    assert saved == 32 * save_at, "the checkpoint holds the position the loop consumed"
    [read_ahead] = [row["loader_next_index"] for row in before if "loader_next_index" in row]
    assert read_ahead > saved, "the loader had read ahead, so saving its own state would skip"


def test_save_training_rejects_an_object_without_a_position(tmp_path):
    import course_lib as grain
    from course_lib.checkpoint import checkpoint_manager, save_training
    from course_lib.training import create_model

    loader = grain.load(grain.RangeDataSource(0, 50, 1), batch_size=4)
    model, optimizer = create_model(4, seed=0)
    with pytest.raises(TypeError, match=r"has no get_state\(\) or set_state\(\).*iter\(loader\)"):
        save_training(checkpoint_manager(tmp_path), 1, model, optimizer, loader)


def test_a_dataset_iterator_is_saved_and_restored_with_its_dict_state(tmp_path):
    import course_lib as grain
    from course_lib import language_model
    from course_lib.checkpoint import checkpoint_manager, restore_training, save_training

    dataset = grain.MapDataset.range(100).shuffle(seed=3).batch(4).to_iter_dataset()
    iterator = iter(dataset)
    next(iterator), next(iterator)
    model, optimizer = language_model.create_training(16, seed=0, features=8)
    manager = checkpoint_manager(tmp_path / "run")
    save_training(manager, 2, model, optimizer, iterator)
    expected = [next(iterator).tolist() for _ in range(3)]
    fresh = iter(dataset)
    assert restore_training(manager, model, optimizer, fresh) == 2
    assert [next(fresh).tolist() for _ in range(3)] == expected
    state_file = tmp_path / "run" / "2" / "data" / "process_0-of-1.json"
    assert json.loads(state_file.read_text()) == iterator_state_after(dataset, 2)
    manager.close()
    iterator.close(), fresh.close()


def iterator_state_after(dataset, steps: int) -> dict:
    with iter(dataset) as iterator:
        for _ in range(steps):
            next(iterator)
        return iterator.get_state()
