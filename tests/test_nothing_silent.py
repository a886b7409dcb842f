"""Issue 57, "nothing mixed, nothing silent": one writer per run directory, every failure one line, mistakes named
where they happen, resume that gets going. Real processes, real files, real locks; one test per fixed case."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import gymnasium as gym
import numba
import numpy as np
import pytest
import torch

import rapidrl as rr
from rapidrl import cli
from rapidrl.envs.core.base import ActionMaskError
from rapidrl.runs import config as rundir
from rapidrl.runs.layout import read_summary
from rapidrl.runs.lock import RunInUseError, RunLock, lock_holder
from rapidrl.train.checkpoint import ModelFileError, latest_checkpoint, list_checkpoints

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["--set", "algo.num_envs=4", "--set", "algo.num_steps=64", "--set", "algo.minibatch_size=128",
         "--set", "algo.update_epochs=1"]


def rapidrl_cmd(*args, cwd=None, env=None, script=False, **kw) -> subprocess.CompletedProcess:
    """``python -m rapidrl ARGS`` (script: the installed ``rapidrl`` console script) in a fresh process."""
    exe = [str(Path(sys.executable).with_name("rapidrl"))] if script else [sys.executable, "-m", "rapidrl"]
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([*exe, *map(str, args)], capture_output=True, text=True, cwd=cwd, env=full_env,
                          timeout=300, **kw)


def one_error_line(out: subprocess.CompletedProcess) -> str:
    assert out.returncode == 2, (out.returncode, out.stderr[-2000:])
    lines = out.stderr.strip().splitlines()
    assert lines[-1].startswith("rapidrl: error: "), out.stderr[-2000:]
    assert "Traceback" not in out.stderr, out.stderr[-2000:]
    return lines[-1]


def train_small(run: Path, *extra) -> None:
    assert cli.main(["train", "ppo", "CartPole-v1", "--timesteps", "1024", "--run-dir", str(run), "--headless",
                     "--eval-episodes", "0", *SMALL, "--set", "run.checkpoint_every=256", *extra]) == 0


# -- 1. one writer per run ----------------------------------------------------------------------------------------

def _wait_for_holder(run: Path, proc: subprocess.Popen, timeout: float = 120) -> int:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        pid = lock_holder(run) if run.is_dir() else None
        if pid is not None:
            return pid
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    raise AssertionError("the trainer never took the run's lock")


def test_a_second_writer_is_refused_naming_the_holder_and_sigkill_leaves_no_stale_lock(tmp_path):
    run = tmp_path / "run"
    trainer = subprocess.Popen([sys.executable, "-m", "rapidrl", "train", "ppo", "CartPole-v1", "--timesteps",
                                "100000000", "--run-dir", str(run), "--headless", "--eval-episodes", "0", *SMALL],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert _wait_for_holder(run, trainer) == trainer.pid
        writers = (["train", "--resume", run, "--headless"], ["collect", run, "--steps", "10"],
                   ["train", "ppo", "CartPole-v1", "--run-dir", run])
        with ThreadPoolExecutor(4) as pool:  # the four processes at once: the trainer burns a core meanwhile
            refused = list(pool.map(lambda argv: rapidrl_cmd(*argv), writers))
            monitor = pool.submit(rapidrl_cmd, "monitor", run, "--once")
            for out in refused:
                line = one_error_line(out)
                assert f"{run} is in use: `rapidrl train` (pid {trainer.pid}) is writing it" in line, line
                assert f"kill {trainer.pid}" in line
            with pytest.raises(RunInUseError, match=f"pid {trainer.pid}"):
                RunLock(run).acquire()
            # readers do not take the lock
            assert monitor.result().returncode == 0
    finally:
        trainer.send_signal(signal.SIGKILL)
        trainer.wait()
    assert lock_holder(run) is None  # the kernel dropped it with the process
    with RunLock(run, "test"):
        assert lock_holder(run) == os.getpid()


def test_the_lock_is_reentrant_in_one_process_and_free_after(tmp_path):
    with RunLock(tmp_path, "a"):
        with RunLock(tmp_path, "b"):  # the CLI creates a run, then trains it: one lock
            assert lock_holder(tmp_path) == os.getpid()
        assert lock_holder(tmp_path) == os.getpid()
    assert lock_holder(tmp_path) is None


_RACE = """
import sys
from rapidrl.runs.config import new_run_dir
print(*[new_run_dir(sys.argv[1], "ppo", "CartPole-v1").name for _ in range(25)], sep="\\n")
"""


def test_new_run_dirs_are_claimed_atomically_by_racing_processes(tmp_path):
    procs = [subprocess.Popen([sys.executable, "-c", _RACE, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)}) for _ in range(3)]
    names = [n for p in procs for n in p.communicate(timeout=120)[0].split()]
    assert all(p.returncode == 0 for p in procs)
    assert len(names) == 75 and len(set(names)) == 75  # no directory handed out twice


_HOLD = """
import sys, time
from rapidrl.runs.lock import RunLock
RunLock(sys.argv[1], "rapidrl collect").acquire()
print("held", flush=True)
time.sleep(600)
"""


def test_an_explicit_run_dir_is_checked_under_its_lock(tmp_path):
    run = tmp_path / "claimed"
    run.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(run)], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert holder.stdout.readline().strip() == "held"
        with contextlib.ExitStack() as hold:
            with pytest.raises(RunInUseError, match=rf"`rapidrl collect` \(pid {holder.pid}"):
                rundir.new_run_dir(tmp_path, "ppo", "CartPole-v1", run, hold=hold)
    finally:
        holder.kill()
        holder.wait()


# -- 2. every failure one line -------------------------------------------------------------------------------------

def _in_namespace(shell: str, *args, cwd) -> subprocess.CompletedProcess:
    """Run ``shell`` (a mount command) then ``python -m rapidrl ARGS`` in a user + mount namespace of their own (no
    root needed where unprivileged user namespaces are on; skipped where they are not)."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare (util-linux)")
    probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"user namespaces are off here: {probe.stderr.decode().strip()}")
    command = " ".join(map(str, [sys.executable, "-m", "rapidrl", *args]))
    return subprocess.run(["unshare", "-rm", "sh", "-c", f"{shell} && exec {command}"], capture_output=True, text=True,
                          cwd=cwd, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)


def test_a_full_disk_is_one_line_with_the_space_left_and_what_was_kept(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    out = _in_namespace(f"mount -t tmpfs -o size=400k tmpfs {disk}", "train", "ppo", "CartPole-v1", "--timesteps",
                        "100000", "--runs-root", disk, "--headless", "--eval-episodes", "0", *SMALL,
                        "--set", "run.checkpoint_every=256", "--set", "run.checkpoint_keep=100", cwd=tmp_path)
    line = one_error_line(out)
    assert "no space left on the device writing " in line and " free there)" in line, line
    assert "kept the last checkpoint, " in line and "step_" in line and "rapidrl train --resume" in line, line


def test_a_read_only_directory_is_one_line(tmp_path):
    disk = tmp_path / "ro"
    disk.mkdir()
    out = _in_namespace(f"mount -t tmpfs -o ro tmpfs {disk}", "train", "ppo", "CartPole-v1", "--runs-root", disk,
                        "--timesteps", "256", cwd=tmp_path)
    assert f"rapidrl: error: read-only file system: cannot write {disk}" in one_error_line(out)


def test_permission_denied_is_one_line(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    if os.geteuid() == 0:  # root writes anywhere, but not as the root of a user namespace into another user's folder
        os.chown(locked, 65534, 65534)
        locked.chmod(0o555)
        out = _in_namespace("true", "train", "ppo", "CartPole-v1", "--runs-root", locked, "--timesteps", "256",
                            cwd=tmp_path)
    else:
        locked.chmod(0o555)
        out = rapidrl_cmd("train", "ppo", "CartPole-v1", "--runs-root", locked, "--timesteps", "256", cwd=tmp_path)
    assert f"rapidrl: error: permission denied: {locked}" in one_error_line(out)


def test_corrupt_and_foreign_model_files_are_one_line_in_eval(tmp_path):
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"\x00garbage" * 50)
    assert f"{bad} is not a readable rapidrl model file" in one_error_line(rapidrl_cmd("eval", bad))
    torch.save({"weights": torch.zeros(2)}, tmp_path / "foreign.pt")
    assert "foreign.pt is not a rapidrl model file" in one_error_line(rapidrl_cmd("eval", tmp_path / "foreign.pt"))
    with pytest.raises(ModelFileError, match="is not a readable rapidrl model file"):  # from Python: the same line
        rr.PPO.load(bad)


def test_an_env_module_that_raises_on_import_is_one_line(tmp_path):
    (tmp_path / "brokenenv.py").write_text('raise RuntimeError("my env module is broken")\n')
    for argv in (["train", "ppo", "brokenenv:X-v0"], ["train", "ppo", "CartPole-v1", "--import", "brokenenv"]):
        line = one_error_line(rapidrl_cmd(*argv, cwd=tmp_path))
        assert "brokenenv" in line and "RuntimeError: my env module is broken" in line, line


def test_debug_flag_and_env_var_show_the_traceback(tmp_path):
    (tmp_path / "bad.pt").write_bytes(b"junk")
    for out in (rapidrl_cmd("eval", "bad.pt", "--debug", cwd=tmp_path),
                rapidrl_cmd("eval", "bad.pt", cwd=tmp_path, env={"RAPIDRL_DEBUG": "1"})):
        assert out.returncode == 1 and "Traceback" in out.stderr and "ModelFileError" in out.stderr
    assert "--debug" in rapidrl_cmd("--help").stdout


# -- 3. mistakes named where they happen ---------------------------------------------------------------------------

@numba.njit(cache=True)
def _reset(state, i, params, rng_key, rng_counter):
    state[i, 0] = 0


@numba.njit(cache=True)
def _step(state, i, actions, params, elapsed, rng_key, rng_counter):
    state[i, 0] += 1
    return 1.0, state[i, 0] >= 8


@numba.njit(cache=True)
def _observe(state, i, obs):
    obs[i, :] = 0.0
    obs[i, 0] = state[i, 0] / 10.0


@numba.njit(cache=True)
def _mask(state, i, mask_out):  # env 1's mask empties at step 5 of its episode: the user's bug
    mask_out[i, :] = not (i == 1 and state[i, 0] == 5)


@numba.njit(cache=True)
def _final_empty_mask(state, i, mask_out):  # only the final state of an episode has no valid action: allowed
    mask_out[i, :] = state[i, 0] < 8


_SPACES = dict(observation_space=gym.spaces.Box(0.0, 10.0, (3,), np.float32), action_space=gym.spaces.Discrete(4),
               state_shape=(None, 1), state_dtype=np.int64, reset=_reset, step=_step, observe=_observe,
               max_episode_steps=50)
EMPTY = rr.envs.NumbaEnv(id="EmptyMaskAt5-v0", mask=_mask, **_SPACES)
FINAL = rr.envs.NumbaEnv(id="EmptyFinalMask-v0", mask=_final_empty_mask, **_SPACES)
rr.envs.register(EMPTY)
EMPTY_ERROR = "env 1 has no valid action after step 5 of its episode: its action mask row is all False"


def test_an_empty_mask_is_refused_by_the_step_that_produced_it():
    envs = EMPTY.make_vec(3, seed=0)
    envs.reset(seed=0)
    for _ in range(4):
        envs.step(np.zeros(3, np.int64))
    with pytest.raises(ActionMaskError, match=EMPTY_ERROR):
        envs.step(np.zeros(3, np.int64))
    ok = FINAL.make_vec(3, seed=0)  # SAME_STEP: the final state's mask goes to final_action_mask, empty is fine
    ok.reset(seed=0)
    for _ in range(20):
        info = ok.step(np.zeros(3, np.int64))[4]
    assert info["action_mask"].any(1).all()
    nxt = FINAL.make_vec(3, seed=0, autoreset_mode="next_step")  # NEXT_STEP: the final state is shown, not acted in
    nxt.reset(seed=0)
    for _ in range(20):
        nxt.step(np.zeros(3, np.int64))


@pytest.mark.parametrize("algo, settings", [
    ("ppo", {}),  # the fused collector
    ("ppo", {"collection": "step"}),
    ("ppo", {"collect_threads": 3}),  # env 1 is the second of three threads' ranges
    ("a2c", {}),
    ("dqn", {"learning_starts": 16, "batch_size": 8, "buffer_size": 100}),
    ("pqn", {}),
], ids=["ppo-fused", "ppo-step", "ppo-fused-3-threads", "a2c", "dqn", "pqn"])
def test_every_algorithm_refuses_an_empty_mask_at_its_step(algo, settings):
    model = getattr(rr, algo.upper())("EmptyMaskAt5-v0", num_envs=3, seed=0, **settings)
    with pytest.raises(ActionMaskError, match=EMPTY_ERROR):
        model.learn(3 * 64, progress_bar=False)


class _GymMasked(gym.Env):
    """A Gymnasium env with sb3-contrib's action_masks(); empty after 3 steps."""

    observation_space = gym.spaces.Box(0.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(3)

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.zeros(2, np.float32), 0.0, False, False, {}

    def action_masks(self):
        return np.full(3, self.t < 3, np.int8)  # int8, as many envs give them


def test_a_gymnasium_env_with_an_empty_mask_is_refused_at_its_step():
    from rapidrl.envs.adapters.gymnasium import SyncVecEnv

    envs = SyncVecEnv([_GymMasked for _ in range(2)])
    envs.reset(seed=0)
    envs.step(np.zeros(2, np.int64))
    envs.step(np.zeros(2, np.int64))
    with pytest.raises(ActionMaskError, match="env 0 has no valid action after step 3 of its episode"):
        envs.step(np.zeros(2, np.int64))


def test_predict_accepts_the_mask_dtypes_training_accepts():
    model = rr.PPO("InvalidActionDiscrete-v0", env_kwargs={"dim": 6, "n_invalid_actions": 3}, num_envs=2, seed=0)
    obs = np.zeros((2, *model.observation_space.shape), np.float32)
    want = model.predict(obs, deterministic=True, action_masks=np.array([[1, 0, 0, 0, 0, 1]] * 2, bool))
    for dtype in (np.int8, np.uint8, np.int64, np.float32):
        got = model.predict(obs, deterministic=True, action_masks=np.array([[1, 0, 0, 0, 0, 1]] * 2, dtype))
        assert (got == want).all(), dtype
    with pytest.raises(ValueError, match="must hold only 0 and 1"):
        model.predict(obs, action_masks=np.array([[2, 0, 0, 0, 0, 1]] * 2, np.int8))
    with pytest.raises(ValueError, match=r"action_masks\[1\] has no valid action"):
        model.predict(obs, action_masks=np.array([[1, 0, 0, 0, 0, 0], [0] * 6], np.int8))


def test_a_float_terminated_is_refused_when_the_env_is_defined():
    @numba.njit(cache=True)
    def step(state, i, actions, params, elapsed, rng_key, rng_counter):
        state[i, 0] += 1
        return 1.0, 0.0 if state[i, 0] < 10 else 1.0

    with pytest.raises(TypeError, match=r"FloatTerm-v0: step must return \(reward, terminated\): a number and a bool"):
        rr.envs.NumbaEnv(id="FloatTerm-v0", mask=None, **{**_SPACES, "step": step})


def test_a_run_shorter_than_the_warm_up_is_refused_by_the_cli_and_warned_by_learn(tmp_path, capsys):
    assert cli.main(["train", "ddpg", "Pendulum-v1", "--timesteps", "2000", "--runs-root", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "algo.learning_starts = 25,000" in err and "--set algo.learning_starts=" in err
    assert not any(tmp_path.iterdir())  # no run directory made
    model = rr.DQN("CartPole-v1", learning_starts=500, batch_size=32, buffer_size=1000, seed=0)
    with pytest.warns(UserWarning, match=r"shorter than DQN's warm-up: .*algo.learning_starts = 500"):
        model.learn(100, progress_bar=False)
    assert cli.main(["train", "ppo", "CartPole-v1", "--timesteps", "100", "--run-dir", str(tmp_path / "p"),
                     "--headless", "--eval-episodes", "0", *SMALL]) == 0
    assert "shorter than one PPO rollout (algo.num_envs 4 x algo.num_steps 64 = 256 steps)" in capsys.readouterr().err


# -- 4. resume that gets you going ---------------------------------------------------------------------------------

def test_resume_skips_a_corrupt_newest_checkpoint_saying_so(tmp_path, capsys):
    run = tmp_path / "run"
    train_small(run)
    (run / "model.pt").unlink()
    newest = latest_checkpoint(run / "checkpoints")
    newest.write_bytes(b"\x00garbage" * 100)  # as a disk error would leave it (a killed write leaves a .tmp)
    capsys.readouterr()
    assert cli.main(["train", "--resume", str(run), "--headless"]) == 0
    out = capsys.readouterr()
    assert f"warning: skipped {newest.name}: {newest} is not a readable rapidrl model file" in out.err
    assert "step_000000000768.pt (step 768), the newest that loads (1 newer skipped)" in out.out
    assert read_summary(run)["timesteps"] == 1024 and (run / "model.pt").is_file()


def test_resume_after_raising_run_timesteps_trains_the_steps_left_saying_how(tmp_path, capsys):
    """Editing config.toml's run.timesteps upwards and resuming was a traceback (the checkpoint's learn call had
    another total): it trains the steps left as a new learn call, with a warning that says its schedules restart."""
    run = tmp_path / "run"
    train_small(run)  # 1024 steps, finished
    config = (run / "config.toml").read_text()
    assert "timesteps = 1024" in config
    (run / "config.toml").write_text(config.replace("timesteps = 1024", "timesteps = 1536"))
    capsys.readouterr()
    assert cli.main(["train", "--resume", str(run), "--headless"]) == 0
    out = capsys.readouterr()
    assert ("run.timesteps is 1,536 in config.toml, the checkpoint's run was started for 1,024: training goes on "
            "for the 512 steps left as a new learn call") in out.err
    assert "trained steps 1,024 to 1,536" in out.out and read_summary(run)["timesteps"] == 1536


def test_resume_with_a_replay_buffer_that_does_not_load_goes_on_with_an_empty_one_saying_so(tmp_path, capsys):
    run = tmp_path / "run"
    assert cli.main(["train", "dqn", "CartPole-v1", "--timesteps", "600", "--run-dir", str(run), "--headless",
                     "--eval-episodes", "0", "--set", "run.checkpoint_every=256", "--set", "algo.learning_starts=64",
                     "--set", "algo.buffer_size=1000", "--set", "algo.hidden=[16, 16]"]) == 0
    newest = latest_checkpoint(run / "checkpoints")
    newest.unlink()  # killed before its last checkpoint: the resume has steps left
    older = latest_checkpoint(run / "checkpoints")
    (older.with_name(older.name + ".buffer") / "obs.npy").write_bytes(b"garbage")  # a disk error's leftovers
    capsys.readouterr()
    assert cli.main(["train", "--resume", str(run), "--headless"]) == 0
    out = capsys.readouterr()
    assert f"warning: the replay buffer saved with {older.name} does not load (" in out.err
    assert "resuming with an empty one" in out.err and f"resuming from {older}" in out.out
    assert read_summary(run)["timesteps"] >= 600


def test_eval_falls_back_to_the_newest_model_file_that_loads(tmp_path, capsys):
    run = tmp_path / "run"
    train_small(run)
    (run / "model.pt").write_bytes(b"junk")
    capsys.readouterr()
    assert cli.main(["eval", str(run), "--episodes", "1"]) == 0
    out = capsys.readouterr()
    assert f"warning: skipped {run / 'model.pt'}: " in out.err and "not a readable rapidrl model file" in out.err
    assert f"{run / 'checkpoints' / 'step_000000001024.pt'}: eval return" in out.out


def test_resume_without_a_checkpoint_says_it_starts_from_step_0(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    train_small(tmp_path / "done")
    shutil.copy(tmp_path / "done" / "config.toml", run / "config.toml")
    capsys.readouterr()
    assert cli.main(["train", "--resume", str(run), "--headless"]) == 0
    assert f"{run} has no checkpoint yet: training starts from step 0" in capsys.readouterr().err


def test_stale_temporary_files_are_removed_at_the_next_start(tmp_path, capsys):
    run = tmp_path / "run"
    train_small(run)
    (run / "model.pt").unlink()
    latest_checkpoint(run / "checkpoints").unlink()  # killed before its last checkpoint: a resume has work to do
    stale = [run / "summary.json.tmp", run / "checkpoints" / ".step_000000001024.pt.abc123.tmp",
             run / ".monitor.bin.4242.tmp"]
    for path in stale:
        path.write_bytes(b"half")
    (run / "checkpoints" / "step_000000000512.pt.buffer.tmp").mkdir()
    capsys.readouterr()
    assert cli.main(["train", "--resume", str(run), "--headless"]) == 0
    assert "removed 4 temporary file(s) of unfinished writes" in capsys.readouterr().err
    assert not any(p.name.endswith(".tmp") for d in (run, run / "checkpoints") for p in d.iterdir())
    assert [s for s, _ in list_checkpoints(run / "checkpoints")][-1] == 1024


# -- 5. the console script finds the user's modules ----------------------------------------------------------------

def test_the_console_script_imports_modules_from_the_current_directory(tmp_path):
    script = Path(sys.executable).with_name("rapidrl")
    if not script.is_file():
        pytest.skip("the rapidrl console script is not installed beside this python")
    (tmp_path / "mycartpole.py").write_text(textwrap.dedent("""
        import gymnasium as gym
        gym.register("MyCartPole-v0", entry_point="gymnasium.envs.classic_control:CartPoleEnv", max_episode_steps=50)
    """))
    common = ["--timesteps", "256", "--eval-episodes", "0", "--headless", *SMALL]
    for argv in (["train", "ppo", "MyCartPole-v0", "--import", "mycartpole", "--run-dir", "a", *common],
                 ["train", "ppo", "mycartpole:MyCartPole-v0", "--run-dir", "b", *common]):
        out = rapidrl_cmd(*argv, cwd=tmp_path, script=True)
        assert out.returncode == 0, out.stderr[-2000:]
    assert "current directory first" in " ".join(rapidrl_cmd("train", "--help", script=True).stdout.split())


# -- also found ----------------------------------------------------------------------------------------------------

def test_a_missing_preset_dataset_says_how_to_build_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path))
    assert cli.main(["train", "iql", "Hopper-v5", "--timesteps", "100"]) == 2
    err = capsys.readouterr().err
    assert "no dataset 'rapidrl/hopper/medium-replay-v0'" in err and "rapidrl collect" in err


def test_cql_on_a_discrete_dataset_suggests_discrete_cql_or_bc(tmp_path):
    pytest.importorskip("minari")
    from rapidrl.buffers.dataset import Episode, write_dataset

    space = gym.spaces.Box(-5, 5, (4,), np.float32)
    episodes = [Episode(np.zeros((6, 4), np.float32), np.zeros(5, np.int64), np.ones(5, np.float32),
                        np.r_[np.zeros(4, bool), True], np.zeros(5, bool))]
    write_dataset("test/disc-v0", episodes, space, gym.spaces.Discrete(2), env_id="CartPole-v1", root=tmp_path)
    with pytest.raises(TypeError, match=r"for Discrete actions use discrete_cql or bc"):
        rr.CQL("CartPole-v1", dataset=str(tmp_path / "test" / "disc-v0"))


def test_warnings_module_is_quiet_for_a_long_enough_run():
    model = rr.DQN("CartPole-v1", learning_starts=64, batch_size=32, buffer_size=1000, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        model.learn(128, progress_bar=False)
