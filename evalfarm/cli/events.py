"""The live output of ``evalfarm run`` and ``evalfarm zoo build``: one line per finished unit (or model), retries,
lost workers and warnings as they happen, a progress line in a terminal, then the run's summary.

A terminal gets a transient progress line (and embedding bars for the in-process executor); a log gets the same
progress line printed after each unit and whenever the workers change, so a log of a long run shows where it is,
and a heartbeat at a steady interval (:data:`HEARTBEAT_S`) while nothing else is printed: the model and task being
embedded with its texts so far and texts/s (the in-process executor), or the progress line with the time elapsed.
"""

from __future__ import annotations

import time
from types import TracebackType
from typing import TYPE_CHECKING, Any

from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from evalfarm.cli.rendering import Output, console

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
    if e.kind in ("skipped", "eta"):
        return f"[dim]{e.message}[/]"
    if e.kind == "warning":  # RunSummary.warnings among them: each is printed here, once
        return f"[yellow]warning:[/] {escape(str(e.message))}"
    return None


HEARTBEAT_S = 30.0
"""Seconds without a line in a log after which the run prints where it is (a terminal has its live line)."""


class RunPrinter:
    """The ``on_event`` and ``progress`` callbacks of a run, printing as the run goes; a context manager around
    the run (the live progress line)."""

    def __init__(self, heartbeat: float = HEARTBEAT_S) -> None:
        self.heartbeat = heartbeat
        self.last_printed = time.monotonic()  # when a log last got a line
        self.last_progress = "planning"  # the progress line of the last event
        self.embedding: dict[str, list[float]] = {}  # label -> [started, texts done, total]
        self.prog = Progress(
            TextColumn("{task.description}"),
            console=console,
            transient=True,
            refresh_per_second=4,
            disable=not console.is_terminal or Output.quiet,
        )
        self.line = self.prog.add_task("planning")
        self.embed_bars: dict[str, Any] = {}
        self.ready_once: set[str] = set()  # workers that were ready: a second worker-ready is a restarted one

    def __enter__(self) -> RunPrinter:
        self.prog.__enter__()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.prog.__exit__(kind, exc, tb)

    def on_progress(self, label: str, advance: int, total: int) -> None:
        """The in-process executor's embedding progress: one bar per model and task; in a log, a heartbeat."""
        if label not in self.embed_bars:
            self.embed_bars[label] = self.prog.add_task(f"  embed {label}", total=total)
            self.embedding[label] = [time.monotonic(), 0.0, float(total)]
        self.prog.advance(self.embed_bars[label], advance)
        state = self.embedding[label]
        state[1] += advance
        if self._beat_due():
            took = max(time.monotonic() - state[0], 1e-9)
            self._log(
                f"heartbeat · embedding {label}: {state[1]:.0f}/{state[2]:.0f} texts, {state[1] / took:.0f} texts/s"
                f" · {self.last_progress}"
            )

    def _beat_due(self) -> bool:
        return not (console.is_terminal or Output.quiet) and time.monotonic() - self.last_printed >= self.heartbeat

    def _log(self, text: str) -> None:
        console.print(text, highlight=False, markup=False)
        self.last_printed = time.monotonic()

    def on_event(self, e: RunEvent) -> None:
        text = event_line(e)
        if Output.quiet and e.kind != "warning":
            text = None  # --quiet: warnings only; the summary follows the run
        if text is not None:
            self.prog.console.print(text, highlight=False)
            self.last_printed = time.monotonic()
        self.last_progress = e.progress.line()
        self.prog.update(self.line, description=self.last_progress)
        # without a live line (a log), the line is printed after each unit and whenever the workers change after a
        # loss: lost (alive / restarting), then back (restarted)
        revived = False
        if e.kind == "worker-ready" and e.worker is not None:
            revived = e.worker.name in self.ready_once
            self.ready_once.add(e.worker.name)
        if not (console.is_terminal or Output.quiet) and (e.kind in ("unit", "worker-lost") or revived):
            self._log(self.last_progress)
        elif e.kind == "tick" and self._beat_due():  # the scheduler waits on its workers: say it is alive
            self._log(f"heartbeat · {self.last_progress}")


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
