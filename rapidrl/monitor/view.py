"""The terminal monitor: reads run directories' metrics files and draws them with rich.

It is a separate process from the trainer and only ever reads (``MetricsReader``), so it can be started,
killed and restarted at any time without touching training.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from rapidrl.monitor.metrics_file import MetricsReader, Snapshot
from rapidrl.runs.layout import MONITOR_FILE, read_summary

SPARK = "▁▂▃▄▅▆▇█"
STALE_AFTER_S = 30.0
DETACHED = 130  # run_monitor's return value when the user pressed Ctrl-C


def sparkline(values, width: int = 60) -> str:
    """Unicode block sparkline of the last ``width`` values (empty string for none)."""
    vals = [v for v in list(values)[-width:] if math.isfinite(v)]
    if not vals:
        return ""
    lo, hi = min(vals), max(vals)
    span = hi - lo or 1.0
    return "".join(SPARK[min(len(SPARK) - 1, int((v - lo) / span * len(SPARK)))] for v in vals)


def _hms(seconds: float) -> str:
    if not math.isfinite(seconds) or seconds < 0:
        return "--:--:--"
    s = int(seconds)
    return f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"


def _fmt(v: float) -> str:
    if math.isnan(v):
        return "-"
    if not math.isfinite(v):
        return str(v)
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.4g}"


@dataclass
class RunView:
    """One run being watched: its directory, reader (once the file exists) and trainer process handle."""

    run_dir: Path
    reader: MetricsReader | None = None
    process: psutil.Process | None = None
    pid: int = 0

    def poll(self) -> Snapshot | None:
        """Latest snapshot, or None while the trainer has not created the metrics file yet."""
        if self.reader is None:
            path = self.run_dir / MONITOR_FILE
            if not path.is_file():
                return None
            self.reader = MetricsReader(path)
        snap = self.reader.snapshot()
        if snap.pid != self.pid:
            self.pid, self.process = snap.pid, None
            try:
                self.process = psutil.Process(snap.pid)
                self.process.cpu_percent(None)
            except psutil.Error:
                self.process = None
        return snap

    def trainer_alive(self) -> bool:
        try:
            return self.process is not None and self.process.is_running() and \
                self.process.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    def state(self, snap: Snapshot) -> str:
        """The run's status as a user should read it ("running", "finished", "failed", "stopped", "lost")."""
        if snap.status != "running":
            return snap.status
        return "running" if self.trainer_alive() else "lost (trainer exited without finishing)"

    def render(self, snap: Snapshot | None) -> Panel:
        if snap is None:
            return Panel(Text("waiting for the trainer to start (no monitor.bin yet)…"), title=str(self.run_dir))
        v = snap.values
        steps, total = v.get("global_step", 0.0), snap.total_steps
        sps = v.get("charts/SPS", math.nan)
        state = self.state(snap)
        colour = {"running": "green", "finished": "cyan", "failed": "red"}.get(state, "yellow")
        t = Table.grid(padding=(0, 2))
        t.add_column(style="bold")
        t.add_column()
        t.add_row("status", Text(state.upper(), style=f"bold {colour}"))
        frac = steps / total if total > 0 else 0.0
        bar = "█" * int(30 * frac) + "░" * (30 - int(30 * frac))
        eta = f"ETA {_hms((total - steps) / sps)}" if state == "running" and sps > 0 else ""
        t.add_row("steps", f"{steps:,.0f} / {total:,.0f}  {bar} {100 * min(frac, 1.0):.0f}%   {eta}")
        up = (time.time() if state == "running" else snap.heartbeat) - snap.start_time
        t.add_row("speed", f"{_fmt(sps)} SPS   updates {v.get('updates', 0.0):,.0f}   up {_hms(up)}")
        ret = v.get("charts/episodic_return", math.nan)
        t.add_row("episodes", f"{v.get('episodes', 0.0):,.0f}   return {_fmt(ret)} (mean of last 20)")
        if len(snap.returns):
            t.add_row("returns", f"{sparkline(snap.returns)}  min {_fmt(snap.returns.min())} "
                                 f"max {_fmt(snap.returns.max())} (last {len(snap.returns)})")
        evals = [k for k in v if k.startswith("eval/")]
        if evals:
            t.add_row("eval", "   ".join(f"{k[5:]} {_fmt(v[k])}" for k in evals))
        losses = [k for k in v if k.startswith("losses/")]
        if losses:
            t.add_row("losses", "   ".join(f"{k[7:]} {_fmt(v[k])}" for k in losses))
        phases = {k[10:]: v[k] for k in v if k.startswith("time/frac_") and math.isfinite(v[k])}
        if phases:
            t.add_row("phases", "   ".join(f"{k} {100 * f:.0f}% {'▇' * max(1, round(10 * f))}"
                                           for k, f in sorted(phases.items(), key=lambda kv: -kv[1])))
        t.add_row("trainer", self._proc_line(snap))
        return Panel(t, title=f"[bold]{snap.run_name}[/]", subtitle=str(self.run_dir), border_style=colour)

    def _proc_line(self, snap: Snapshot) -> str:
        if not self.trainer_alive():
            return f"pid {snap.pid} (not running)"
        try:
            with self.process.oneshot():
                cpu = self.process.cpu_percent(None)
                rss = self.process.memory_info().rss / 2**20
                threads = self.process.num_threads()
        except psutil.Error:
            return f"pid {snap.pid} (gone)"
        age = time.time() - snap.heartbeat
        stale = f"   last update {age:.0f}s ago" if age > STALE_AFTER_S else ""
        return f"pid {snap.pid}   CPU {cpu:.0f}%   RSS {rss:,.0f} MB   threads {threads}{stale}"


def runs_table(run_dirs: list[Path]) -> Table:
    """One line per run: name, status, steps, last return (from monitor.bin, else summary.json)."""
    table = Table("run", "status", "steps", "return", "eval")
    for d in run_dirs:
        view, summary = RunView(Path(d)), read_summary(d) or {}
        try:
            snap = view.poll()
        except (OSError, ValueError):
            snap = None
        status = view.state(snap) if snap is not None else summary.get("status", "not started")
        steps = snap.values.get("global_step", math.nan) if snap else summary.get("timesteps", math.nan)
        total = snap.total_steps if snap else summary.get("total_timesteps", math.nan)
        ret = snap.values.get("charts/episodic_return", math.nan) if snap else math.nan
        ev = summary.get("eval_mean")
        table.add_row(Path(d).name, status, f"{_fmt(steps)} / {_fmt(total)}", _fmt(ret),
                      "-" if ev is None else f"{ev:.1f} ± {summary.get('eval_std', 0.0):.1f}")
    return table


def _done(view: RunView, snap: Snapshot | None) -> bool:
    if snap is None:
        return read_summary(view.run_dir) is not None  # finished before this monitor saw its file
    return view.state(snap) != "running"


def run_monitor(run_dirs: list[Path], *, refresh_hz: float = 4.0, once: bool = False,
                console: Console | None = None, stop_when=None) -> int:
    """Draw ``run_dirs`` live until every run has ended (returns 0) or Ctrl-C (detach: returns DETACHED).

    once: draw one frame and return. stop_when: optional ``f() -> bool`` also ending the loop.
    """
    console = console or Console()
    views = [RunView(Path(d)) for d in run_dirs]

    def frame():
        snaps = [v.poll() for v in views]
        hint = Text("Ctrl-C detaches the monitor; training is not affected.", style="dim")
        return Group(*(v.render(s) for v, s in zip(views, snaps)), hint), snaps

    if once:
        console.print(frame()[0])
        return 0
    try:
        with Live(frame()[0], console=console, refresh_per_second=refresh_hz, screen=False) as live:
            while True:
                time.sleep(1.0 / refresh_hz)
                group, snaps = frame()
                live.update(group)
                if all(_done(v, s) for v, s in zip(views, snaps)) or (stop_when is not None and stop_when()):
                    break
    except KeyboardInterrupt:
        console.print("monitor detached; training continues. Reattach with: rapidrl monitor "
                      + " ".join(str(d) for d in run_dirs))
        return DETACHED
    return 0
