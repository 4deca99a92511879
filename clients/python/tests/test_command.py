"""The helpers for command-executor programs, and examples/train_example.py
keeping the contract through them. The worker's own parser reads these lines
in tests/command_executor_test.cc and tests/worker_e2e_test.cc, which run
train_example.py under a real hpo-worker."""

import io
import json
import os
import subprocess
import sys
from contextlib import redirect_stdout

import pytest

import heterotune
from conftest import CLIENT_DIR, REPO

EXAMPLE = REPO / "examples" / "train_example.py"


@pytest.fixture
def clean_env(monkeypatch):
    for k in list(os.environ):
        if k.startswith("HPO_"):
            monkeypatch.delenv(k)
    return monkeypatch


def test_report_prints_the_hpo_line_and_flushes(clean_env):
    out = io.StringIO()
    with redirect_stdout(out):
        line = heterotune.report(3, loss=0.41, accuracy=0.875, samples_per_sec=51234, batch_size=64,
                                 device="cpu")
    assert line == "hpo: step=3 loss=0.41 accuracy=0.875 samples_per_sec=51234 batch_size=64 device=cpu"
    assert out.getvalue() == line + "\n"


def test_values_read_back_as_the_same_numbers(clean_env):
    line = heterotune.metric_line(1, loss=0.1 + 0.2, tiny=1e-300, big=1.5e300)
    values = dict(kv.split("=") for kv in line.split()[1:])
    assert float(values["loss"]) == 0.1 + 0.2
    assert float(values["tiny"]) == 1e-300 and float(values["big"]) == 1.5e300


def test_step_is_optional(clean_env):
    assert heterotune.metric_line(loss=1) == "hpo: loss=1"


@pytest.mark.parametrize("kwargs, names", [
    ({"loss": float("nan")}, "loss"),
    ({"loss": float("inf")}, "loss"),
    ({"loss": "low"}, "loss"),
    ({"loss": True}, "loss"),
    ({"loss": 1, "batch_size": 0}, "batch_size"),
    ({"loss": 1, "threads": 2.5}, "threads"),
    ({"loss": 1, "samples_per_sec": -1}, "samples_per_sec"),
    ({"loss": 1, "device": "cuda 0"}, "device"),
    ({"batch_size": 32}, "no metrics"),
    ({}, "no metrics"),
])
def test_what_the_worker_would_refuse_is_refused_here_naming_the_key(clean_env, kwargs, names):
    with pytest.raises(ValueError, match=names):
        heterotune.metric_line(1, **kwargs)


def test_bad_keys_and_steps(clean_env):
    with pytest.raises(ValueError, match="a key is"):
        heterotune.metric_line(1, **{"val loss": 1.0})
    with pytest.raises(ValueError, match="step"):
        heterotune.metric_line(-1, loss=1.0)
    with pytest.raises(ValueError, match="at most 64"):
        heterotune.metric_line(1, **{f"m{i}": 1.0 for i in range(65)})
    assert heterotune.metric_line(1, **{"val/loss": 1.0, "a:b.c-d": 2}) == "hpo: step=1 val/loss=1.0 a:b.c-d=2"


def test_the_trials_own_system_parameters_may_be_words(clean_env):
    clean_env.setenv("HPO_SYSTEM", json.dumps({"batch_size": 32, "precision": "fp32"}))
    assert heterotune.metric_line(2, loss=0.5, precision="bf16") == "hpo: step=2 loss=0.5 precision=bf16"
    # ... and do not count as metrics.
    with pytest.raises(ValueError, match="no metrics"):
        heterotune.metric_line(2, precision="bf16")


def test_system_reads_the_file_then_falls_back(clean_env, tmp_path):
    clean_env.setenv("HPO_SYSTEM", json.dumps({"batch_size": 32}))
    assert heterotune.system() == {"batch_size": 32}  # no file: the starting setting
    f = tmp_path / "system.json"
    f.write_text(json.dumps({"batch_size": 128, "threads": 2}))
    clean_env.setenv("HPO_SYSTEM_FILE", str(f))
    assert heterotune.system() == {"batch_size": 128, "threads": 2}
    f.unlink()  # gone as the trial ends: the caller's last setting
    assert heterotune.system(default={"batch_size": 128}) == {"batch_size": 128}
    assert heterotune.system() == {"batch_size": 32}


def test_outside_a_trial(clean_env):
    assert heterotune.params() == {}
    assert heterotune.system() == {}
    assert heterotune.max_steps(10) == 10
    ckpt = heterotune.checkpoint()
    assert (ckpt.dir, ckpt.stop_step, ckpt.resume_step, ckpt.resuming) == (None, 0, 0, False)
    assert heterotune.checkpoint_dir() is None


def test_checkpoint_contract_from_the_environment(clean_env, tmp_path):
    clean_env.setenv("HPO_CHECKPOINT_DIR", str(tmp_path))
    clean_env.setenv("HPO_STOP_STEP", "4")
    clean_env.setenv("HPO_RESUME_STEP", "2")
    clean_env.setenv("HPO_PARAMS", '{"lr": 0.1}')
    clean_env.setenv("HPO_MAX_STEPS", "9")
    ckpt = heterotune.checkpoint()
    assert (ckpt.dir, ckpt.stop_step, ckpt.resume_step, ckpt.resuming) == (str(tmp_path), 4, 2, True)
    assert heterotune.checkpoint_dir() == str(tmp_path)
    assert heterotune.params() == {"lr": 0.1} and heterotune.max_steps() == 9
    clean_env.setenv("HPO_STOP_STEP", "four")
    with pytest.raises(ValueError, match="HPO_STOP_STEP"):
        heterotune.checkpoint()


def run_example(env, *args):
    full = {k: v for k, v in os.environ.items() if not k.startswith("HPO_") and k != "PYTHONPATH"}
    full.update(env)
    return subprocess.run([sys.executable, str(EXAMPLE), *args], env=full, capture_output=True, text=True,
                          timeout=120)


def test_train_example_pauses_and_resumes_through_the_helper(tmp_path):
    """examples/train_example.py uses the helper without it being installed
    (it finds clients/python beside itself): it follows HPO_SYSTEM_FILE,
    saves at HPO_STOP_STEP and resumes at HPO_RESUME_STEP to the same curve
    as a run that never stopped."""
    system_file = tmp_path / "system.json"
    system_file.write_text('{"batch_size": 16}')
    base = {"HPO_PARAMS": '{"lr": 0.2, "width": 4}', "HPO_MAX_STEPS": "4", "HPO_SEED": "3",
            "HPO_SYSTEM": '{"batch_size": 16}', "HPO_SYSTEM_FILE": str(system_file)}
    whole = run_example({**base, "HPO_CHECKPOINT_DIR": str(tmp_path / "a")})
    assert whole.returncode == 0, whole.stderr
    lines = whole.stdout.splitlines()
    assert [ln.split()[1] for ln in lines] == ["step=1", "step=2", "step=3", "step=4"]
    assert all("batch_size=16" in ln for ln in lines)

    ckpt = tmp_path / "b"
    ckpt.mkdir()
    paused = run_example({**base, "HPO_CHECKPOINT_DIR": str(ckpt), "HPO_STOP_STEP": "2"})
    assert paused.returncode == 0, paused.stderr
    assert len(paused.stdout.splitlines()) == 2 and (ckpt / "state.json").exists()
    resumed = run_example({**base, "HPO_CHECKPOINT_DIR": str(ckpt), "HPO_RESUME_STEP": "2"})
    assert resumed.returncode == 0, resumed.stderr

    def curve(text):  # loss and accuracy, not the measured speed
        return [[kv for kv in ln.split() if kv.split("=")[0] in ("step", "loss", "accuracy")]
                for ln in text.splitlines()]

    assert curve(paused.stdout + resumed.stdout) == curve(whole.stdout)

    # A state that is not the one it expects: exit 65, no metric line.
    refused = run_example({**base, "HPO_CHECKPOINT_DIR": str(ckpt), "HPO_RESUME_STEP": "3"})
    assert refused.returncode == heterotune.RESTORE_REFUSED_EXIT_STATUS and refused.stdout == ""


def test_train_example_follows_a_changed_system_setting(tmp_path):
    system_file = tmp_path / "system.json"
    system_file.write_text('{"batch_size": 256}')
    r = run_example({"HPO_MAX_STEPS": "2", "HPO_SYSTEM": '{"batch_size": 16}',
                     "HPO_SYSTEM_FILE": str(system_file), "HPO_CHECKPOINT_DIR": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    assert all("batch_size=256" in ln for ln in r.stdout.splitlines())


def test_pip_metadata_is_readable():
    # pyproject.toml names the package and needs nothing beyond the standard library.
    tomllib = pytest.importorskip("tomllib")  # Python 3.11
    meta = tomllib.loads((CLIENT_DIR / "pyproject.toml").read_text())
    assert meta["project"]["name"] == "heterotune" and meta["project"]["dependencies"] == []
    assert meta["project"]["version"] == heterotune.__version__
