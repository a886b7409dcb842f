"""The live monitor: the metrics file (layout, seqlock, no torn reads), the view, and the monitor as a user
sees it in a terminal (tmux) next to a live training run that it must never disturb."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from rapidrl.monitor.metrics_file import MAGIC, MetricsReader, MetricsWriter, TornReadError, file_size
from rapidrl.monitor.view import RunView, run_monitor, sparkline
from rapidrl.runs.layout import CONFIG_FILE, MONITOR_FILE

ROOT = Path(__file__).resolve().parents[1]


def test_roundtrip_names_values_ring_status(tmp_path):
    path = tmp_path / "m.bin"
    w = MetricsWriter(path, run_name="ppo-CartPole-v1-x", total_steps=1000, capacity=4, ring_size=3, pid=4242)
    assert path.stat().st_size == file_size(4, 3) and path.read_bytes()[:8] == MAGIC
    r = MetricsReader(path)
    snap = r.snapshot()
    assert (snap.run_name, snap.pid, snap.total_steps, snap.status) == ("ppo-CartPole-v1-x", 4242, 1000.0, "running")
    assert snap.values == {} and len(snap.returns) == 0
    w.update({"a": 1.0, "b": 2, "skip": "text"})
    w.push_returns([10.0, 11.0, 12.0, 13.0])  # one more than the ring holds: oldest dropped
    w.update({"a": 5.0, "c": 3.0, "d": 4.0, "e": 99.0})  # "e" exceeds capacity 4: dropped, not an error
    w.set_status("finished")
    snap = r.snapshot()
    assert snap.values == {"a": 5.0, "b": 2.0, "c": 3.0, "d": 4.0}
    np.testing.assert_array_equal(snap.returns, [11.0, 12.0, 13.0])
    assert snap.episodes_pushed == 4 and snap.status == "finished" and snap.seq % 2 == 0
    w.close()
    assert MetricsReader(path).snapshot().values["a"] == 5.0  # the file outlives the writer


def test_reader_follows_a_restarted_writer(tmp_path):
    path = tmp_path / "m.bin"
    MetricsWriter(path, pid=1).update({"x": 1.0})
    r = MetricsReader(path)
    assert r.snapshot().values == {"x": 1.0}
    MetricsWriter(path, pid=2).update({"y": 2.0})  # a resumed trainer replaces the file
    snap = r.snapshot()
    assert snap.pid == 2 and snap.values == {"y": 2.0}


def test_reader_rejects_foreign_and_truncated_files(tmp_path):
    foreign = tmp_path / "foreign.bin"
    foreign.write_bytes(b"\0" * 4096)
    with pytest.raises(ValueError, match="not a rapidrl metrics file"):
        MetricsReader(foreign)
    path = tmp_path / "m.bin"
    MetricsWriter(path)
    path.write_bytes(path.read_bytes()[:300])
    with pytest.raises(ValueError, match="truncated or corrupt"):
        MetricsReader(path)


_HAMMER = textwrap.dedent("""
    import sys, time
    from rapidrl.monitor.metrics_file import MetricsWriter
    w = MetricsWriter(sys.argv[1], capacity=64, ring_size=32)
    names = [f"field_{i:02d}" for i in range(64)]
    print("ready", flush=True)
    end = time.monotonic() + float(sys.argv[2])
    i = 0
    while time.monotonic() < end:
        i += 1
        with w.writing():
            w.update(dict.fromkeys(names, float(i)))
            w.push_returns([float(i)])
    w.update(dict.fromkeys(names, -1.0))
""")


def test_no_torn_reads_while_a_writer_process_hammers_the_file(tmp_path):
    """Every field and the newest ring sample carry the same counter in every snapshot (seqlock)."""
    path = tmp_path / "m.bin"
    writer = subprocess.Popen([sys.executable, "-c", _HAMMER, str(path), "3.0"], stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline().strip() == "ready"
        reader = MetricsReader(path)
        seen, last = set(), 0.0
        while writer.poll() is None:
            snap = reader.snapshot()
            vals = set(snap.values.values())
            if not snap.values or vals == {-1.0}:
                continue
            assert len(snap.values) == 64 and len(vals) == 1, f"torn snapshot: {sorted(vals)[:5]}"
            (counter,) = vals
            assert snap.returns[-1] == counter and snap.episodes_pushed == counter
            np.testing.assert_array_equal(np.diff(snap.returns), 1.0)  # the ring holds consecutive counters
            assert counter >= last
            last = counter
            seen.add(counter)
        assert writer.wait(timeout=10) == 0
        assert len(seen) > 20, "the reader did not overlap with the writer enough to test anything"
    finally:
        writer.kill()
        writer.wait()


def test_snapshot_gives_up_after_its_time_budget_while_the_writer_holds_the_lock(tmp_path):
    """A writer stuck inside a write (odd sequence number) makes the reader fail after ``timeout`` seconds."""
    w = MetricsWriter(tmp_path / "m.bin")
    w.update({"a": 1.0})
    section = w.writing()
    section.__enter__()
    reader = MetricsReader(tmp_path / "m.bin")
    t0 = time.monotonic()
    with pytest.raises(TornReadError, match=r"busy for 0\.2 s"):
        reader.snapshot(timeout=0.2)
    assert 0.2 <= time.monotonic() - t0 < 5.0
    section.__exit__(None, None, None)
    assert reader.snapshot().values["a"] == 1.0


def test_sparkline_and_view_render(tmp_path):
    assert sparkline([]) == "" and sparkline([1.0, 1.0]) == "▁▁"
    assert sparkline([0.0, 1.0, 2.0, 3.0]) == "▁▃▆█"  # floor(8 * (v - min) / span), capped at 7
    run = tmp_path / "run"
    run.mkdir()
    (run / CONFIG_FILE).write_text("")
    w = MetricsWriter(run / MONITOR_FILE, run_name="ppo-CartPole-v1-test", total_steps=10_000)
    w.update({"global_step": 2500.0, "charts/SPS": 50_000.0, "episodes": 12.0, "losses/value_loss": 0.25,
              "time/frac_update": 0.75, "time/frac_collect": 0.25})
    w.push_returns([10.0, 20.0, 500.0])
    console = Console(record=True, width=120)
    run_monitor([run], once=True, console=console)
    text = console.export_text()
    for expected in ("ppo-CartPole-v1-test", "RUNNING", "2,500 / 10,000", "50,000 SPS", "value_loss 0.25",
                     "update 75%", "▁", "█", "ETA 00:00:00"):
        assert expected in text, (expected, text)
    w.set_status("failed")
    view = RunView(run)
    assert view.state(view.poll()) == "failed"


def test_view_reports_a_trainer_that_died_without_finishing(tmp_path):
    """status "running" in the file but the pid is gone -> "lost"."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    MetricsWriter(tmp_path / MONITOR_FILE, pid=dead.pid)
    view = RunView(tmp_path)
    assert view.state(view.poll()).startswith("lost")


# -- as a user sees it ---------------------------------------------------------------------------------

def _tmux() -> str:
    exe = shutil.which("tmux")
    if exe is None:
        pytest.fail("tmux is not installed: apt-get install -y tmux (the monitor's terminal test needs it)")
    return exe


def _capture(tmux: str, session: str) -> str:
    return subprocess.run([tmux, "capture-pane", "-p", "-t", session], capture_output=True, text=True).stdout


def _wait_for(predicate, timeout: float, what: str):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


CLI = [sys.executable, "-m", "rapidrl"]
SMALL = ["--set", "algo.num_envs=4", "--set", "algo.num_steps=64", "--set", "algo.minibatch_size=128",
         "--set", "algo.update_epochs=2"]


def _steps(run: Path) -> float:
    return MetricsReader(run / MONITOR_FILE).snapshot().values.get("global_step", 0.0)


def test_monitor_in_a_terminal_attach_kill_reattach_while_training(tmp_path):
    """Detached training; a monitor in tmux shows it live; killing the monitor (SIGKILL, then by closing the
    terminal) leaves the trainer running and progressing; after the trainer is stopped a new monitor shows it."""
    tmux = _tmux()
    run = tmp_path / "attach-test-run"
    out = subprocess.run([*CLI, "train", "ppo", "CartPole-v1", "--timesteps", "100000000", "--run-dir", str(run),
                          "--eval-episodes", "2", *SMALL, "--detach"],
                         capture_output=True, text=True, env=_env(), timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert f"rapidrl monitor {run}" in out.stdout
    pid = int(out.stdout.split("pid ")[1].split(")")[0])
    session = f"rrmon{os.getpid()}"
    try:
        for attempt in ("SIGKILL", "kill-session"):
            subprocess.run([tmux, "new-session", "-d", "-s", session, "-x", "130", "-y", "30",
                            " ".join([*CLI, "monitor", str(run)])], check=True, env=_env(), cwd=tmp_path)
            screen = _wait_for(lambda: _trainer_ok(pid, run) and (s := _capture(tmux, session)) and "losses" in s
                               and "RUNNING" in s and s, 90, "the monitor to show the running trainer")
            for expected in (run.name, "steps", f"pid {pid}", "losses", "returns"):
                assert expected in screen, screen
            if attempt == "SIGKILL":
                pane_pid = subprocess.run([tmux, "display-message", "-p", "-t", session, "#{pane_pid}"],
                                          capture_output=True, text=True, check=True).stdout.strip()
                os.kill(int(pane_pid), signal.SIGKILL)
            subprocess.run([tmux, "kill-session", "-t", session], capture_output=True)
            before = _steps(run)
            _wait_for(lambda b=before: _steps(run) > b, 30, f"training to progress after the monitor's {attempt}")
            assert _alive(pid)
        os.kill(pid, signal.SIGTERM)  # the user stops training: `kill PID`, documented as a clean stop
        _wait_for(lambda: not _alive(pid), 60, "the trainer to stop")
        summary = json.loads((run / "summary.json").read_text())
        assert summary["status"] == "stopped" and summary["timesteps"] > 0
        after = subprocess.run([*CLI, "monitor", str(run), "--once"], capture_output=True, text=True, env=_env())
        assert after.returncode == 0 and "STOPPED" in after.stdout, after.stdout
    finally:
        subprocess.run([tmux, "kill-session", "-t", session], capture_output=True)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_train_with_monitor_in_a_terminal(tmp_path):
    """`rapidrl train ... --monitor` draws the monitor in the same terminal and ends with the eval result."""
    tmux = _tmux()
    session = f"rrtrain{os.getpid()}"
    cmd = " ".join([*CLI, "train", "ppo", "CartPole-v1", "--timesteps", "6000", "--runs-root", str(tmp_path / "runs"),
                    "--eval-episodes", "2", *SMALL, "--monitor"])
    try:
        subprocess.run([tmux, "new-session", "-d", "-s", session, "-x", "130", "-y", "40",
                        f"{cmd}; echo EXIT=$?; sleep 600"], check=True, env=_env(), cwd=tmp_path)
        screen = _wait_for(lambda: (s := _capture(tmux, session)) and "EXIT=" in s and s, 150, "train --monitor")
        assert "EXIT=0" in screen, screen
        assert "ppo-CartPole-v1-" in screen and "SPS" in screen and "FINISHED" in screen, screen
        assert "eval return" in screen and "model saved to" in screen, screen
    finally:
        subprocess.run([tmux, "kill-session", "-t", session], capture_output=True)


def _trainer_ok(pid: int, run: Path) -> bool:
    """True while the trainer lives; fails the test with its log when it died."""
    if not _alive(pid):
        log = (run / "train.log").read_text()[-3000:] if (run / "train.log").is_file() else "(no train.log)"
        raise AssertionError(f"the trainer exited:\n{log}")
    return True


def _alive(pid: int) -> bool:
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:  # not our child (detached through the CLI): ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    return done == 0


