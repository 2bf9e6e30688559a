"""The live output of ``evalfarm run`` and ``evalfarm zoo build``: one line per finished unit (or model), retries,
lost workers and warnings as they happen, a progress line in a terminal, then the run's summary.

A terminal gets a transient progress line and a bar of the texts embedded (and a bar per embedding pass for the
in-process executor); a log gets the same progress line printed after each unit and whenever the workers change, so
a log of a long run shows where it is, and a heartbeat at a steady interval (:data:`HEARTBEAT_S`) while nothing else
is printed: the progress line (units, texts done / to do, texts/s, workers, elapsed, ETA) and what each worker is on
(``w0: embedding all-minilm-l6-v2 41k/176k texts``), in process and under Ray alike.
"""

from __future__ import annotations

import json
import time
from types import TracebackType
from typing import TYPE_CHECKING, Any, TextIO

from rich.console import RenderableType
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text

from evalfarm.cli.rendering import Output, console
from evalfarm.scheduler.progress import fmt_count

if TYPE_CHECKING:
    from evalfarm.runner import RunEvent, RunSummary
    from evalfarm.zoo import Built


def unit_line(o: Any) -> str:
    """A finished unit, in rich markup: status, model · task, seconds, its first two numbers, error or notes."""
    from evalfarm.outcomes import Status

    mark = {Status.DONE: "[green]done", Status.FAILED: "[red]FAILED", Status.SKIPPED: "[dim]skipped"}.get(
        o.status, f"[dim]{o.status}"
    )
    shown = ", ".join(f"{k} {v:.4g}" for k, v in list(o.summary.items())[:2]) if o.summary else ""
    return (
        f"{mark}[/] {o.model} · {o.task} ({o.seconds:.1f}s)"
        + (f" {shown}" if shown else "")
        + (f" [red]{o.stage}: {escape(str(o.error))}" if o.error else "")
        + (" [yellow]degenerate[/]" if getattr(o, "degenerate", None) else "")
        + (" [yellow]thin[/]" if getattr(o, "thin", None) else "")
        + (f" [dim]({escape(o.detail)})" if o.status == Status.SKIPPED and o.detail else "")
    )


def event_line(e: RunEvent) -> str | None:
    """What an event prints (rich markup), or None for the events that only move the progress line."""
    if e.kind == "unit":
        return unit_line(e.outcome)
    if e.kind == "retry":
        assert e.job is not None  # a retry names the job it puts back
        return f"[yellow]retry[/] {e.job.label} (attempt {e.job.attempts + 1}): {escape(str(e.message))}"
    if e.kind == "quarantined":
        return f"[yellow]{escape(str(e.message))}[/]"
    if e.kind == "worker-lost":
        assert e.worker is not None  # and a lost worker, the worker
        return f"[yellow]worker lost[/] {e.worker.name}: {escape(str(e.message))}"
    if e.kind in ("skipped", "eta", "dashboard"):
        return f"[dim]{escape(str(e.message))}[/]"
    if e.kind == "warning":  # RunSummary.warnings among them: each is printed here, once
        return f"[yellow]warning:[/] {escape(str(e.message))}"
    return None


HEARTBEAT_S = 30.0
"""Seconds without a line in a log after which the run prints where it is (a terminal has its live line)."""


class _Bar(ProgressColumn):
    """A bar for the tasks that ask for one (texts, an in-process pass); the progress line has none."""

    def __init__(self, bar_width: int = 30) -> None:
        super().__init__()
        self.bar = BarColumn(bar_width=bar_width)

    def render(self, task: Task) -> RenderableType:
        return self.bar.render(task) if task.fields.get("bar") else Text("")


class RunPrinter:
    """The ``on_event`` and ``progress`` callbacks of a run, printing as the run goes; a context manager around
    the run (the live progress line and bars on a terminal).

    ``json_out``: a stream for ``run --format json``'s events, one JSON object a line (``eta``, ``dashboard``,
    ``unit``, ``warning``, ``progress`` at every heartbeat): the same counts as the heartbeat's."""

    def __init__(self, heartbeat: float = HEARTBEAT_S, json_out: TextIO | None = None) -> None:
        self.heartbeat = heartbeat
        self.json_out = json_out
        self.last_printed = time.monotonic()  # when a log last got a line
        self.last_json = time.monotonic()  # when the JSON stream last got a progress event
        self.last_progress = "planning"  # the progress line of the last event
        self.tracker: Any = None  # the run's ProgressTracker, from its first event
        self.prog = Progress(
            TextColumn("{task.description}"),
            _Bar(bar_width=30),
            TextColumn("{task.fields[info]}"),
            console=console,
            transient=True,
            refresh_per_second=4,
            disable=not console.is_terminal or Output.quiet,
        )
        self.line = self.prog.add_task("planning", info="")
        self.texts_bar = self.prog.add_task("texts", total=None, visible=False, bar=True, info="")
        self.embed_bars: dict[str, Any] = {}
        self.ready_once: set[str] = set()  # workers that were ready: a second worker-ready is a restarted one

    def __enter__(self) -> RunPrinter:
        self.prog.__enter__()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.prog.__exit__(kind, exc, tb)

    def on_progress(self, label: str, advance: int, total: int) -> None:
        """The in-process executor's embedding progress: one bar per pass; in a log, a heartbeat (the scheduler's
        loop waits on this very pass, so no tick comes meanwhile)."""
        if label not in self.embed_bars:
            self.embed_bars[label] = self.prog.add_task(f"  embed {label}", total=total, bar=True, info="")
        self.prog.advance(self.embed_bars[label], advance)
        self._refresh()
        self._beat()

    def _refresh(self) -> None:
        """The live line and the texts bar from the tracker as it is now."""
        if self.tracker is None:
            return
        self.last_progress = self.tracker.line()
        self.prog.update(self.line, description=self.last_progress)
        done, total = self.tracker.texts()
        if total:
            rate = self.tracker.text_rate()
            info = f"{fmt_count(done)}/{fmt_count(total)} texts" + (f" · {fmt_count(rate)}/s" if rate else "")
            self.prog.update(self.texts_bar, completed=done, total=total, visible=True, info=info)

    def _beat_due(self) -> bool:
        return not (console.is_terminal or Output.quiet) and time.monotonic() - self.last_printed >= self.heartbeat

    def _beat(self) -> None:
        """Every ``heartbeat`` seconds: a ``heartbeat`` line in a log (what each worker is on), a progress event
        in the JSON stream."""
        if self.json_out is not None and time.monotonic() - self.last_json >= self.heartbeat:
            self._json("progress")
        if self._beat_due():
            self._log(self.heartbeat_line())

    def heartbeat_line(self) -> str:
        """``heartbeat · <progress line> · <worker>: <what it does> · …``."""
        doing = self.tracker.doing() if self.tracker is not None else {}
        return " · ".join(["heartbeat", self.last_progress, *(f"{w}: {what}" for w, what in doing.items())])

    def _log(self, text: str) -> None:
        console.print(text, highlight=False, markup=False)
        self.last_printed = time.monotonic()

    def _json(self, kind: str, **fields: Any) -> None:
        if self.json_out is None:
            return
        body: dict[str, Any] = {"event": kind, **fields}
        if self.tracker is not None:
            body.update(self.tracker.snapshot())
        self.json_out.write(json.dumps(body, default=str) + "\n")
        self.json_out.flush()
        if kind == "progress":
            self.last_json = time.monotonic()

    def on_event(self, e: RunEvent) -> None:
        self.tracker = e.progress
        text = event_line(e)
        if Output.quiet and e.kind != "warning":
            text = None  # --quiet: warnings only; the summary follows the run
        if text is not None:
            self.prog.console.print(text, highlight=False)
            self.last_printed = time.monotonic()
        self._refresh()
        self._json_event(e)
        # without a live line (a log), the line is printed after each unit and whenever the workers change after a
        # loss: lost (alive / restarting), then back (restarted)
        revived = False
        if e.kind == "worker-ready" and e.worker is not None:
            revived = e.worker.name in self.ready_once
            self.ready_once.add(e.worker.name)
        if not (console.is_terminal or Output.quiet) and (e.kind in ("unit", "worker-lost") or revived):
            self._log(self.last_progress)
        elif e.kind == "tick":  # the scheduler waits on its workers: say it is alive, and where it is
            self._beat()

    def _json_event(self, e: RunEvent) -> None:
        if self.json_out is None:
            return
        if e.kind == "unit" and e.outcome is not None:
            o = e.outcome
            unit = {"model": o.model, "task": o.task, "status": str(o.status), "seconds": round(o.seconds, 3),
                    "stage": None if o.stage is None else str(o.stage), "error": o.error}  # fmt: skip
            self._json("unit", unit=unit)
        elif e.kind in ("eta", "dashboard", "warning", "quarantined", "worker-lost", "retry"):
            self._json(e.kind, message=e.message)


def print_warnings(warnings: list[str]) -> None:
    """Warnings no event carried (an interrupted run emits none)."""
    for w in warnings:
        console.print(f"[yellow]warning:[/] {escape(w)}", highlight=False, soft_wrap=True)


def print_summary(summary: RunSummary) -> None:
    """The run's last lines: counts, where it ran and wrote, then what needs a look (quarantined files, models not
    evaluated, degenerate units, failures)."""
    c = summary.counts()
    where = f"{summary.executor}" + (f", {summary.workers} workers" if summary.executor == "ray" else "")
    extra = "".join(
        f", {n} {what}"
        for n, what in (
            (len(summary.degenerate), "degenerate"),
            (len(summary.thin), "too thin to rank"),
            (len(summary.quarantined), "files quarantined"),
            (len(summary.not_evaluated), "selected models not evaluated"),
        )
        if n
    )
    console.print(
        f"run {summary.run_id}: {c['done']} done, {c['skipped']} skipped, {c['failed']} failed{extra} "
        f"in {summary.seconds:.1f}s ({where}) → {summary.warehouse}",
        highlight=False,
    )
    for q in summary.quarantined:
        console.print(f"[yellow]quarantined[/] {q.path}: {q.reason} → {q.moved_to}", highlight=False)
    if summary.not_evaluated:
        console.print(
            f"[yellow]not evaluated[/] (no selected task of their level): {', '.join(summary.not_evaluated)}",
            highlight=False,
        )
    if summary.degenerate:
        console.print(
            "[yellow]degenerate[/] (left off the leaderboard; `leaderboard_all` and the `quality` view show them):",
            highlight=False,
        )
        for o in summary.degenerate:
            console.print(f"  {o.model} · {o.task}: {o.degenerate}", highlight=False)
    if summary.thin:
        console.print("[yellow]too thin to rank[/] (left off the leaderboard; `leaderboard_all` shows them):")
        for o in summary.thin:
            console.print(f"  {o.model} · {o.task}: {o.thin}", highlight=False)
    if summary.failed:
        console.print("[bold red]failures:[/]")
        for f in summary.failed:
            console.print(f"  {f.model} · {f.task} [{f.stage}] {f.error}", markup=False, highlight=False)
    report = summary.report or {}
    if report.get("slowest"):
        s = report["slowest"]
        console.print(f"slowest unit: {s['model']} · {s['task']} ({s['seconds']:.1f}s)", highlight=False, markup=False)
    if report.get("moved") is not None:
        console.print(f"moved since the previous run: {json.dumps(report['moved'], default=str)}", markup=False)
    if report and summary.recorded:
        console.print(
            f"summary recorded: evalfarm status {summary.run_id} (the runs view's summary column)",
            highlight=False,
            markup=False,
        )
    print_notified(summary)


def print_notified(summary: RunSummary) -> None:
    """What the --notify hook did, when there was one."""
    notified = summary.notified
    if notified is not None:
        console.print(notified.describe(), style=None if notified.ok else "yellow", highlight=False, markup=False)


class ZooPrinter:
    """``evalfarm zoo build``'s progress bar and one line per model (trained, with its time, or cached)."""

    def __init__(self, total: int) -> None:
        self.prog = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
        )
        self.task = self.prog.add_task("zoo build", total=total)

    def __enter__(self) -> ZooPrinter:
        self.prog.__enter__()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.prog.update(self.task, description="zoo build")
        self.prog.__exit__(kind, exc, tb)

    def on_progress(self, model_id: str, built: Built | None) -> None:
        if built is None:
            self.prog.update(self.task, description=f"training {model_id}")
            return
        self.prog.advance(self.task)
        mark = f"[green]trained[/] ({built.seconds:.1f}s)" if built.trained else "[dim]cached[/]"
        self.prog.console.print(f"{mark} {model_id} · {built.fingerprint}")
