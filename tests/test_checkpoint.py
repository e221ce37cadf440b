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


@pytest.mark.timeout(240)
def test_restore_in_fresh_process_continues_batches_and_losses_exactly(tmp_path):
    save_at = random.Random().randint(1, TOTAL_STEPS - 1)
    uninterrupted = _run(tmp_path / "a", TOTAL_STEPS, "run")
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
