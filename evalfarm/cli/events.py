"""The live output of ``evalfarm run`` and ``evalfarm zoo build``: one line per finished unit (or model), retries,
lost workers and warnings as they happen, a progress line in a terminal, then the run's summary.

A terminal gets a transient progress line, redrawn four times a second from the run's progress (so its elapsed
time and ETA move while nothing happens: planning, Ray starting, a model loading) and fitted to the terminal's width
(:func:`evalfarm.scheduler.progress.progress_line`: the ETA and the units are never cut, narrower terminals drop the
least useful fields), and below it a bar of the texts embedded (and a bar per embedding pass for the in-process
executor). A log gets the run's id and how to follow it at its first second, the same progress line after each unit
and whenever the workers change, and a heartbeat at a steady interval (:data:`HEARTBEAT_S`, from a thread of its
own: also while the run plans or Ray starts) while nothing else is printed: the progress line and what each worker is
on (``w0: embedding all-minilm-l6-v2 41k/176k texts``), in process and under Ray alike.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Any, TextIO

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

from evalfarm import api
from evalfarm.cli.rendering import Output, console


def unit_line(o: Any) -> str:
    """A finished unit, in rich markup: status, model · task, seconds, its first two numbers, error or notes."""
    Status = api.Status

    mark = {Status.DONE: "[green]done", Status.FAILED: "[red]FAILED", Status.SKIPPED: "[dim]skipped"}.get(
        o.status, f"[dim]{o.status}"
    )
    shown = ", ".join(f"{k} {v:.4g}" if k else f"{v:.4g}" for k, v in list(o.summary.items())[:2]) if o.summary else ""
    metric = getattr(o, "metric", None)
    shown = f"{metric}: {shown}" if shown and metric else shown  # `spearman: protocol vectors 0.59, raw vectors 0.60`
    return (
        f"{mark}[/] {o.model} · {o.task} ({o.seconds:.1f}s)"
        + (f" {shown}" if shown else "")
        + (f" [red]{o.stage}: {escape(str(o.error))}" if o.error else "")
        + (" [yellow]degenerate[/]" if getattr(o, "degenerate", None) else "")
        + (" [yellow]thin[/]" if getattr(o, "thin", None) else "")
        + (f" [dim]({escape(o.detail)})" if o.status == Status.SKIPPED and o.detail else "")
    )


def event_line(e: api.RunEvent) -> str | None:
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
    if e.kind in ("skipped", "eta", "dashboard", "begin", "starting"):
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


class _LiveProgress(Progress):
    """rich's Progress with the run's line above its bars, as wide as the terminal: the line is drawn afresh at
    every refresh by ``line(width)``, not cut to the bars' table columns."""

    def __init__(self, line: Callable[[int], str], *columns: ProgressColumn, **kwargs: Any) -> None:
        self._line = line
        self._width_of = kwargs.get("console") or console  # rich asks for renderables before its Live exists
        super().__init__(*columns, **kwargs)

    def get_renderables(self) -> Iterable[RenderableType]:
        yield Text(self._line(max(20, self._width_of.width - 1)))
        yield self.make_tasks_table(self.tasks)


class RunPrinter:
    """The ``on_event`` and ``progress`` callbacks of a run, printing as the run goes; a context manager around
    the run (the live progress line and bars on a terminal, the heartbeat's thread in a log).

    ``json_out``: a stream for ``run --format json``'s events, one JSON object a line (``eta``, ``dashboard``,
    ``unit``, ``warning``, ``progress`` at every heartbeat): the same counts as the heartbeat's."""

    def __init__(self, heartbeat: float = HEARTBEAT_S, json_out: TextIO | None = None) -> None:
        self.heartbeat = heartbeat
        self.json_out = json_out
        self.last_printed = time.monotonic()  # when a log last got a line
        self.last_json = time.monotonic()  # when the JSON stream last got a progress event
        self.last_progress = "planning"  # the progress line of the last event
        self.tracker: Any = None  # the run's ProgressTracker, from its first event
        self.prog = _LiveProgress(
            self.live_line,
            TextColumn("{task.description}"),
            _Bar(bar_width=30),
            TextColumn("{task.fields[info]}"),
            console=console,
            transient=True,
            refresh_per_second=4,
            disable=not console.is_terminal or Output.quiet,
        )
        self.texts_bar = self.prog.add_task("texts", total=None, visible=False, bar=True, info="")
        self.embed_bars: dict[str, Any] = {}
        self.ready_once: set[str] = set()  # workers that were ready: a second worker-ready is a restarted one
        self._lock = threading.Lock()  # the heartbeat's thread and the run's print to the same streams
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> RunPrinter:
        self.prog.__enter__()
        if not (console.is_terminal or Output.quiet) or self.json_out is not None:
            self._thread = threading.Thread(target=self._beat_loop, name="evalfarm-log-heartbeat", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        self.prog.__exit__(kind, exc, tb)

    def _beat_loop(self) -> None:
        """A log's heartbeat (and the JSON stream's progress event) at its interval even while no event comes: the
        run plans, Ray starts, a model loads. Never lets an error of its own stop the run."""
        while not self._done.wait(1.0):
            try:
                self._beat()
            except Exception:
                pass

    def live_line(self, width: int) -> str:
        """The terminal's progress line now, fitted to ``width`` (the run's tracker changes under this thread: on a
        clash the last line stays)."""
        if self.tracker is not None:
            try:
                self.last_progress = self.tracker.line(width)
            except RuntimeError:  # a dict changed size during the read: the next refresh reads again
                pass
        return self.last_progress

    def on_progress(self, label: str, advance: int, total: int) -> None:
        """The in-process executor's embedding progress: one bar per pass; in a log, a heartbeat (the scheduler's
        loop waits on this very pass, so no tick comes meanwhile)."""
        if label not in self.embed_bars:
            self.embed_bars[label] = self.prog.add_task(f"  embed {label}", total=total, bar=True, info="")
        self.prog.advance(self.embed_bars[label], advance)
        self._refresh()
        self._beat()

    def _refresh(self) -> None:
        """The texts bar from the tracker as it is now (the line is drawn at every refresh: :meth:`live_line`)."""
        if self.tracker is None:
            return
        self.last_progress = self.tracker.line()
        done, total = self.tracker.texts()
        if total:
            rate, count = self.tracker.text_rate(), api.fmt_count
            info = f"{count(done)}/{count(total)} texts" + (f" · {count(rate)}/s" if rate else "")
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
        """``heartbeat · <progress line> · <worker>: <what it does> · …``, as the run stands now."""
        doing: dict[str, str] = {}
        if self.tracker is not None:
            try:
                self.last_progress, doing = self.tracker.line(), self.tracker.doing()
            except RuntimeError:  # the run's thread changed a dict under this one: the last line stays
                pass
        return " · ".join(["heartbeat", self.last_progress, *(f"{w}: {what}" for w, what in doing.items())])

    def _log(self, text: str) -> None:
        with self._lock:
            console.print(text, highlight=False, markup=False)
            self.last_printed = time.monotonic()

    def _json(self, kind: str, **fields: Any) -> None:
        if self.json_out is None:
            return
        body: dict[str, Any] = {"event": kind, **fields}
        if self.tracker is not None:
            for _ in range(3):
                try:
                    body.update(self.tracker.snapshot())
                    break
                except RuntimeError:  # the run's thread changed a dict under this one: read again
                    continue
        with self._lock:
            self.json_out.write(json.dumps(body, default=str) + "\n")
            self.json_out.flush()
            if kind == "progress":
                self.last_json = time.monotonic()

    def on_event(self, e: api.RunEvent) -> None:
        self.tracker = e.progress
        text = event_line(e)
        if Output.quiet and e.kind != "warning":
            text = None  # --quiet: warnings only; the summary follows the run
        if text is not None:
            with self._lock:
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

    def _json_event(self, e: api.RunEvent) -> None:
        if self.json_out is None:
            return
        if e.kind == "unit" and e.outcome is not None:
            o = e.outcome
            unit = {"model": o.model, "task": o.task, "status": str(o.status), "seconds": round(o.seconds, 3),
                    "stage": None if o.stage is None else str(o.stage), "error": o.error}  # fmt: skip
            self._json("unit", unit=unit)
        elif e.kind in ("begin", "starting", "eta", "dashboard", "warning", "quarantined", "worker-lost", "retry"):
            self._json(e.kind, message=e.message)


def print_warnings(warnings: list[str]) -> None:
    """Warnings no event carried (an interrupted run emits none)."""
    for w in warnings:
        console.print(f"[yellow]warning:[/] {escape(w)}", highlight=False, soft_wrap=True)


def print_summary(summary: api.RunSummary) -> None:
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
    moved = moved_line(report.get("moved"), summary.run_id, summary.warehouse)
    if moved:
        console.print(moved, highlight=False, markup=False, soft_wrap=True)
    if report and summary.recorded:
        console.print(
            f"summary recorded: evalfarm status {summary.run_id} (the runs view's summary column)",
            highlight=False,
            markup=False,
        )
    print_notified(summary)


def moved_line(moved: dict[str, Any] | None, run_id: str, warehouse: object) -> str | None:
    """What moved since the previous run, counted by reason, and the command that lists every change (the end
    summary's ``moved``: the full list is in ``evalfarm diff``, not in the run's log)."""
    if not moved or not moved.get("since"):
        return None
    since = moved["since"]
    counts = moved.get("counts") or {}
    total = sum(counts.values())
    diff = f"evalfarm diff {since} {run_id} --warehouse {warehouse}"
    if not total:
        return f"nothing moved since run {since} ({diff})"
    why = ", ".join(f"{n} {reason}" for reason, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    odd = moved.get("nondeterministic") or 0
    flag = f"; {odd} under an unchanged fingerprint (nondeterminism)" if odd else ""
    return f"moved since run {since}: {total} value{'s' if total != 1 else ''} ({why}){flag}; every one: {diff}"


def print_notified(summary: api.RunSummary) -> None:
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

    def on_progress(self, model_id: str, built: api.Built | None) -> None:
        if built is None:
            self.prog.update(self.task, description=f"training {model_id}")
            return
        self.prog.advance(self.task)
        mark = f"[green]trained[/] ({built.seconds:.1f}s)" if built.trained else "[dim]cached[/]"
        self.prog.console.print(f"{mark} {model_id} · {built.fingerprint}")
