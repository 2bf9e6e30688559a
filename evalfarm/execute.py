"""Execute one model's units: embed what its tasks need (loading the model at most once), then score each task.

Two stages, so a scheduler can run them as separate tasks: ``embed_model`` (read each unit's task, embed the texts the
model's store lacks, stored in shards of ``EMBED_SHARD_TEXTS`` as they are embedded) and ``score_unit`` (read one
task's vectors from the store, run its scorer, write detail tables, then the metrics file). ``execute_model`` chains
them in-process. Failures are isolated: a model that fails to load fails its own units, a task whose data is broken
fails its own unit. A unit's rows are staged as files (:func:`write_results`) and become part of the warehouse when
they are committed, its ``metrics`` rows last: a killed worker leaves nothing that looks complete. On a run's workers
the warehouse is deferred: every file a job staged travels to the driver on the job's first outcome (``staged``),
and the driver commits them in batches (:class:`~evalfarm.warehouse.CommitBatcher`). With ``record_failures=False``
the caller (the scheduler, which retries) writes the ``failures`` rows itself, once, after the last attempt."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import platform
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from evalfarm.catalog.prompts import NO_PROMPT, Prompt
from evalfarm.catalog.registry import Catalog
from evalfarm.catalog.specs import DEFAULT_SENTENCE_FIT_TASK, ModelSpec, PostProcess, spec_hash
from evalfarm.embed import (
    EmbeddingQualityError,
    Encoded,
    TextStore,
    check_quality,
    encode_poolings,
    encode_texts,
    is_binary,
    scorer_prompts,
    task_texts,
    task_vectors,
)
from evalfarm.encoders.prompts import prompt_text, with_prompt
from evalfarm.encoders.protocol import Encoder
from evalfarm.metrics import lookup
from evalfarm.options import RunOptions
from evalfarm.outcomes import Stage, Status, UnitOutcome, failed, record_failure, record_quarantine
from evalfarm.parts import PartClaims
from evalfarm.plan import CODE_VERSIONS, ModelPlan, Unit
from evalfarm.quality import Quality, assess
from evalfarm.ranking import BOARD_TIES
from evalfarm.scorers import scorer_for
from evalfarm.scorers.base import Scorer, ScoreResult
from evalfarm.warehouse import Warehouse, detail_schema, now

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EmbedTick:
    """Where one embedding pass stands, as the worker running it sees it: what a driver shows while a unit has not
    finished yet (a sentence encoder's pass over ~176k texts runs for many minutes on CPU).

    ``pass_id`` names the pass (one model's embed call on one worker; a pooling leader's pass covers its
    siblings' texts too); ``done`` / ``total`` count its texts so far (cumulative: a lost tick loses nothing);
    ``phase`` is ``load`` (the model is loading, nothing embedded yet) or ``embed``; ``seconds`` since the pass
    started, on the worker's clock (``done / seconds`` is its rate); ``derived``: the vectors come from the base
    model's stored ones (a post-processed model: no encoder ran, so no rate worth showing)."""

    pass_id: str
    model: str
    label: str
    done: int
    total: int
    phase: str
    seconds: float
    derived: bool = False

    @property
    def finished(self) -> bool:
        return self.phase == "embed" and self.done >= self.total


@dataclass
class ExecContext:
    catalog: Catalog
    warehouse: Warehouse
    run_id: str
    options: RunOptions = field(default_factory=RunOptions)
    force: bool = False
    progress: Callable[[str, int, int], None] | None = None  # (label, advance, total)
    on_texts: Callable[[EmbedTick], None] | None = None  # each embedding pass's texts so far (see EmbedTick)
    record_failures: bool = True
    encoders: dict[str, Any] = field(default_factory=dict)  # in-memory encoder objects by model id (kind python)
    worker: str = ""  # this worker's name (the scheduler's)
    parts: PartClaims | None = None  # the run's part book: idle workers may help with a model's parts (parts.py)
    placement: dict[str, Any] | None = None  # the job's GPU placement (share, GPU, estimated need), for provenance
    _tasks: dict[str, Any] = field(default_factory=dict)
    _model_rows: dict[str, dict[str, Any]] = field(default_factory=dict)  # models rows of the job under way
    _counted: set[str] = field(default_factory=set)  # text counts this context has checked (remember_count)

    def task_data(self, task_id: str) -> Any:
        """A task's loaded, verified data (cached: a worker reads each task's files once; checksums the driver
        verified this run are trusted, not recomputed)."""
        if task_id not in self._tasks:
            if self.options.verified_files:
                from evalfarm.taskdata.data import trust_verified

                trust_verified(self.options.verified_files)
            spec = self.catalog.task(task_id)
            self._tasks[task_id] = scorer_for(spec.kind).load_for(spec, self.options)
        return self._tasks[task_id]

    def texts(self, task_id: str) -> list[str]:
        spec = self.catalog.task(task_id)
        return list(scorer_for(spec.kind).texts(self.task_data(task_id)))

    def remember_count(self, unit: Unit) -> None:
        """Keep the unit's task's text count in the cache (:mod:`evalfarm.textcounts`), once per task: the next
        run's planner then counts it without loading the task (a generated one is built here, on the worker)."""
        from evalfarm import textcounts

        key = textcounts.key_of(unit.task, unit)
        if key.digest in self._counted:
            return
        self._counted.add(key.digest)
        if textcounts.cached(key) is None:
            textcounts.remember(key, self.texts(unit.task))

    def prompted_texts(self, plan: ModelPlan, task_id: str) -> list[tuple[Prompt, list[str]]]:
        """What ``plan``'s model embeds for a task: (prompt, texts) per prompt (:func:`evalfarm.embed.task_texts`;
        a model without prompts: the task's texts under no prompt)."""
        spec = self.catalog.task(task_id)
        return task_texts(scorer_for(spec.kind), spec, self.task_data(task_id), plan.prompts)

    def store(self, plan: ModelPlan, prompt: Prompt = NO_PROMPT) -> TextStore:
        """The model's text store of the texts it embeds under ``prompt``, keyed as planned."""
        return TextStore(self.warehouse, plan.model, plan.store_for(prompt))


def _fail(ctx: ExecContext, outcome: UnitOutcome) -> UnitOutcome:
    if ctx.record_failures:
        record_failure(ctx.warehouse, ctx.run_id, outcome)
    return outcome


def with_staged(ctx: ExecContext, outcomes: list[UnitOutcome]) -> list[UnitOutcome]:
    """Hand what the job staged in a deferred warehouse to whoever commits (on the first outcome's ``staged``)."""
    if ctx._model_rows:  # one models row per model and job, however many parts it stored
        rows, ctx._model_rows = list(ctx._model_rows.values()), {}
        ctx.warehouse.write("models", rows, run_id=ctx.run_id)
    if ctx.warehouse.deferred and outcomes:
        outcomes[0].staged = [*outcomes[0].staged, *ctx.warehouse.take_pending()]
    return outcomes


def execute_model(plan: ModelPlan, ctx: ExecContext) -> list[UnitOutcome]:
    """Run every unit of one model in-process; never raises for a model or unit failure (they are recorded)."""
    done = [False] * len(plan.units) if ctx.force else ctx.warehouse.done(plan.units)
    todo = [u for u, d in zip(plan.units, done, strict=True) if not d]
    outcomes = [UnitOutcome(u.model, u.task, Status.SKIPPED) for u in plan.units if u not in todo]
    if not todo:
        return outcomes
    by_task = {u.task: u for u in todo}
    for o in embed_model(dataclasses.replace(plan, units=todo, siblings=[]), ctx):
        if o.status is Status.EMBEDDED:
            r = score_unit(plan, by_task[o.task], ctx)
            r.seconds += o.seconds
            outcomes.append(r)
        else:
            outcomes.append(o)
    return outcomes


# ---- embed ------------------------------------------------------------------------------------------------------
def embed_model(plan: ModelPlan, ctx: ExecContext) -> list[UnitOutcome]:
    """Embed stage of every unit in ``plan``: the texts of all its tasks that the model's store lacks (a shard per
    ``EMBED_SHARD_TEXTS``).
    Outcome per unit: ``embedded`` or ``failed``; the embed time is counted in the first embedded unit. The rows it
    wrote (the model's ``models`` row, informational ``failures`` rows) travel on the first outcome."""
    return with_staged(ctx, _embed_model(plan, ctx))


def _embed_model(plan: ModelPlan, ctx: ExecContext) -> list[UnitOutcome]:
    t0 = time.perf_counter()
    started = now()
    outcomes: dict[str, UnitOutcome] = {}
    needed: dict[Prompt, dict[str, None]] = {}  # texts by the prompt they are embedded under (none: one group)
    for u in plan.units:
        try:
            for prompt, texts in ctx.prompted_texts(plan, u.task):
                needed.setdefault(prompt, {}).update(dict.fromkeys(texts))
            _remember_count(ctx, u)
        except Exception as exc:
            outcomes[u.task] = _fail(ctx, failed(u.model, u.task, Stage.TASK, exc, t0, started))
    ok = [u for u in plan.units if u.task not in outcomes]
    dim = None
    if ok:
        work: list[tuple[Prompt, TextStore, list[str]]] = []
        for prompt, wanted in needed.items():
            store = ctx.store(plan, prompt)
            texts = list(wanted)
            missing = texts if ctx.force else store.missing(texts)
            for q in store.quarantined:  # a shard that could not be read: its texts are among `missing`
                record_quarantine(ctx.warehouse, ctx.run_id, q, model=plan.model)
            if missing:
                work.append((prompt, store, missing))
        if work:
            state = {"stage": Stage.LOAD}
            try:
                dim = _embed_missing(ctx, plan, work, state)
            except Exception as exc:
                kind = Stage.EMBED_QUALITY if isinstance(exc, EmbeddingQualityError) else state["stage"]
                for u in ok:
                    outcomes[u.task] = _fail(ctx, failed(u.model, u.task, kind, exc, t0, started))
                ok = []
    seconds = time.perf_counter() - t0
    for u in ok:
        outcomes[u.task] = UnitOutcome(u.model, u.task, Status.EMBEDDED, seconds, dim=dim, started_at=started)
        seconds = 0.0
    return [outcomes[u.task] for u in plan.units]


def _remember_count(ctx: ExecContext, unit: Unit) -> None:
    """:meth:`ExecContext.remember_count`, never a reason for a unit to fail (a count is a report)."""
    try:
        ctx.remember_count(unit)
    except Exception as exc:
        log.debug("text count of %s not kept (%s)", unit.task, exc)


class PassMeter:
    """Counts one embedding pass's texts for the in-process bars (``ExecContext.progress``: label, advance, total)
    and the driver's progress (``ExecContext.on_texts``: an :class:`EmbedTick`); created when the pass starts (a
    ``load`` tick: the worker names its model before the first text), then called with each batch's size."""

    def __init__(self, ctx: ExecContext, model: str, label: str, total: int, *, derived: bool = False) -> None:
        self.ctx, self.model, self.label, self.total, self.derived = ctx, model, label, total, derived
        self.pass_id = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self.done = 0
        self.t0 = time.perf_counter()
        self._tick("load")

    def retotal(self, total: int, label: str) -> None:
        """The pass turned out smaller (a model that cannot pool its siblings' texts): its own texts only."""
        self.total, self.label = total, label
        self._tick("load")

    def __call__(self, n: int) -> None:
        self.done += n
        if self.ctx.progress is not None:
            self.ctx.progress(self.label, n, self.total)
        self._tick("embed")

    def _tick(self, phase: str) -> None:
        if self.ctx.on_texts is None:
            return
        tick = EmbedTick(
            self.pass_id, self.model, self.label, self.done, self.total, phase, time.perf_counter() - self.t0,
            self.derived,
        )  # fmt: skip
        try:
            self.ctx.on_texts(tick)
        except Exception as exc:  # progress is a report: it never fails an embedding
            log.debug("progress report dropped (%s: %s)", type(exc).__name__, exc)


def _note_batching(provenance: dict[str, Any], encoder: object) -> None:
    """What the encoder's batcher had to do on this device (``evalfarm.encoders.batching``: out-of-memory splits and
    the batch they left), into the model's provenance: a record of how it ran, kept out of the shards' metadata."""
    notes = getattr(getattr(encoder, "batcher", None), "notes", None)
    if notes:
        provenance["batching"] = dict(notes)


def _reused_base(spec: ModelSpec) -> PostProcess | None:
    """A post-processed sentence model reads its base's stored vectors unless it overrides how the base loads: its
    transform then, else None."""
    from evalfarm.encoders.loader import _OVERRIDABLE

    if (
        spec.level == "sentence"
        and spec.postprocess is not None
        and spec.base is not None
        and not (set(_OVERRIDABLE) | {"kind", "source", "options"}) & spec.model_fields_set
    ):
        return spec.postprocess
    return None


Work = list[tuple[Prompt, TextStore, list[str]]]
"""(prompt, the model's store of that prompt, the texts it lacks): what one embed call adds, prompt by prompt."""


# long: one model's embedding, by prompt: from its base's vectors, or one load of the encoder and its siblings' texts
def _embed_missing(ctx: ExecContext, plan: ModelPlan, work: Work, state: dict[str, Stage]) -> int:
    """Embed each group's missing texts into its store (a model without prompts: one group, no prompt); returns
    the dimension. ``state["stage"]`` says how far it got (a failure while loading the model is a ``load`` failure,
    after it an ``embed`` one)."""
    from evalfarm.provenance import process_device

    provenance: dict[str, Any] = {"host": platform.node(), "code_versions": CODE_VERSIONS}
    prompted = plan.prompts is not None
    total = sum(len(missing) for _, _, missing in work)
    reused = _reused_base(plan.spec)
    if reused is not None:  # from the base's stored vectors: fast, one shard per prompt
        meter = PassMeter(ctx, plan.model, f"{plan.model} · {total} texts", total, derived=True)
        outs = _embed_from_base(ctx, plan, reused, work, state, provenance)
        meter(total)
        provenance["device"] = process_device(ctx.options.device)
        if prompted:
            provenance["prompts"] = _prompts_provenance(ctx, plan, None)
        for (prompt, store, missing), out in zip(work, outs, strict=True):
            prov = _with_prompt(provenance, None, prompt) if prompted else provenance
            _publish(ctx, plan, store, missing, out, prov)
        return int(outs[-1].emb.shape[1])
    # the siblings' texts are known before the model loads when the kind can share a pass (a transformers
    # checkpoint); a model that turns out not to (no encode_poolings) is checked again once loaded
    siblings = _sibling_work(ctx, plan) if plan.siblings else {}
    own = {prompt: (store, missing) for prompt, store, missing in work}
    order = list(dict.fromkeys([*own, *siblings]))
    union = sum(
        len(set(own[p][1] if p in own else ()).union(*(texts for _, _, texts in siblings.get(p, ())))) for p in order
    )
    n_sib = len({s.model for group in siblings.values() for s, _, _ in group})
    label = f"{plan.model} · {union} texts" + (f" (+ {n_sib} pooling sibling(s))" if siblings else "")
    meter = PassMeter(ctx, plan.model, label, union)
    encoder = _load_for_embedding(ctx, plan, state, provenance)
    provenance["device"] = process_device(ctx.options.device)  # the worker that embedded: its CPU, GPUs, driver
    if not hasattr(encoder, "encode_poolings") and siblings:
        siblings, order = {}, list(own)
        meter.retotal(total, f"{plan.model} · {total} texts")
    if prompted:
        provenance["prompts"] = _prompts_provenance(ctx, plan, encoder)
    _note_placement(ctx, provenance)
    parts = [
        (prompt, part, sibling_parts)
        for prompt in order
        for part, sibling_parts in shard_parts(own[prompt][1] if prompt in own else [], siblings.get(prompt, []))
    ]
    shared_pass = SharedPass.start(ctx, plan, parts, meter, provenance)
    dim = 0
    for k, (prompt, part, sibling_parts) in shared_pass.claims() if shared_pass else enumerate(parts):
        t_part = time.perf_counter()
        store = own[prompt][0] if prompt in own else ctx.store(plan, prompt)
        dim = _embed_under(ctx, plan, store, encoder, prompt, part, sibling_parts, meter, provenance)
        if shared_pass:
            shared_pass.finished(k, time.perf_counter() - t_part)
    dim = dim or int(getattr(encoder, "dim", 0))
    if shared_pass:
        shared_pass.close(provenance)  # who embedded what: the model's row again, with it (even if helpers did all)
        ctx._model_rows[plan.model] = _model_row(ctx, plan, dim, provenance)
    return dim


def _embed_under(
    ctx: ExecContext,
    plan: ModelPlan,
    store: TextStore,
    encoder: Encoder,
    prompt: Prompt,
    part: list[str],
    sibling_parts: list[tuple[ModelPlan, TextStore, list[str]]],
    meter: Callable[[int], None] | None,
    provenance: dict[str, Any],
) -> int:
    """Embed and store one part under its prompt (a model without prompts: as it is); its dimension. The owner of a
    pass and its helpers both come here, so a part's vectors and shard metadata are the same whoever embeds it."""
    prompted = plan.prompts is not None
    enc = with_prompt(encoder, prompt if prompted else None)
    prov = _with_prompt(provenance, encoder, prompt) if prompted else provenance
    dim = _embed_part(ctx, plan, store, enc, part, sibling_parts, meter, prov)
    _note_batching(provenance, encoder)
    return dim


def _with_prompt(provenance: dict[str, Any], encoder: Encoder | None, prompt: Prompt) -> dict[str, Any]:
    """A shard's provenance with the prompt its texts were embedded under (a named one with its text, resolved by
    the encoder; a derived model's from its base, where the name is what is known)."""
    entry: dict[str, Any] = {"text": prompt.text}
    if prompt.name is not None:
        entry = {"name": prompt.name, "text": prompt_text(encoder, prompt) if encoder is not None else None}
    return {**provenance, "prompt": entry}


def _prompts_provenance(
    ctx: ExecContext, plan: ModelPlan, encoder: Encoder | None
) -> dict[str, dict[str, str | None]]:
    """{task: {side: prompt text}} over the plan's units (``prompt`` for a symmetric task): what the model row and
    the model page show. A named prompt's text is the encoder's (None where no encoder loaded: a derived model)."""
    out: dict[str, dict[str, str | None]] = {}
    for u in plan.units:
        spec = ctx.catalog.task(u.task)
        tp = scorer_prompts(scorer_for(spec.kind), spec, plan.prompts)
        sides = {"prompt": tp.document} if tp.query is None else {"query": tp.query, "document": tp.document}
        out[u.task] = {
            side: (prompt_text(encoder, p) if encoder is not None or p.name is None else None)
            for side, p in sides.items()
        }
    return out


def _embed_part(
    ctx: ExecContext,
    plan: ModelPlan,
    store: TextStore,
    encoder: Encoder,
    part: list[str],
    sibling_parts: list[tuple[ModelPlan, TextStore, list[str]]],
    meter: Callable[[int], None] | None,
    provenance: dict[str, Any],
) -> int:
    """Embed and store one part (the model's texts and its pooling siblings' that fall in it); its dimension."""
    if sibling_parts:
        out, shared = _encode_with_siblings(ctx, plan, encoder, part, sibling_parts, meter)
    else:
        out, shared = encode_texts(encoder, part, progress=meter), []
    _note_batching(provenance, encoder)
    if part:
        _publish(ctx, plan, store, part, out, provenance)
    _publish_siblings(ctx, plan, shared, provenance)
    return int(out.emb.shape[1])


def _note_placement(ctx: ExecContext, provenance: dict[str, Any]) -> None:
    """Where the worker ran the model on a GPU cluster (its share of a GPU, the GPU, the model's estimated need):
    the executor's placement record, into the model's provenance."""
    if ctx.placement:
        provenance["placement"] = dict(ctx.placement)


PASS_POLL_SECONDS = 0.2
"""How often a pass's owner, out of parts to claim, looks at its helpers' parts."""


class SharedPass:
    """A model's pass whose parts idle workers may help with (:mod:`evalfarm.parts`): the owner's side. Iterate
    :meth:`claims` (each part this worker claims, then, once none is left to claim, waiting for the helpers' parts and
    taking back any a lost helper gave back), call :meth:`finished` after each part is stored, :meth:`close` at the
    end (who embedded what goes into the model's provenance)."""

    def __init__(self, ctx: ExecContext, plan: ModelPlan, parts: list[Any], meter: PassMeter) -> None:
        assert ctx.parts is not None
        self.book, self.ctx, self.plan, self.parts, self.meter = ctx.parts, ctx, plan, parts, meter
        self.pass_id = meter.pass_id
        self.counted: set[int] = set()

    @classmethod
    def start(
        cls, ctx: ExecContext, plan: ModelPlan, parts: list[Any], meter: PassMeter, provenance: dict[str, Any]
    ) -> SharedPass | None:
        """A shared pass when the worker has a book and the model more than one part; else None (plain loop)."""
        if ctx.parts is None or len(parts) < 2:
            return None
        payload = [(prompt, part, [(s.model, texts) for s, _, texts in sib]) for prompt, part, sib in parts]
        ctx.parts.open(meter.pass_id, plan.model, payload, ctx.worker, float(provenance.get("load_seconds", 0.0)))
        return cls(ctx, plan, parts, meter)

    def claims(self) -> Iterator[tuple[int, Any]]:
        while True:
            got = self.book.claim(self.pass_id, self.ctx.worker)
            if got is not None:
                self.counted.add(got[0])
                yield got[0], self.parts[got[0]]
                continue
            unclaimed, running, done = self.book.status(self.pass_id)
            self._count(done)
            if unclaimed:
                continue
            if not running:
                return
            time.sleep(PASS_POLL_SECONDS)

    def _count(self, done: list[int]) -> None:
        """The helpers' finished parts, into this pass's progress."""
        for k in done:
            if k not in self.counted:
                self.counted.add(k)
                _, part, sibs = self.parts[k]
                self.meter(len(set(part).union(*(texts for _, _, texts in sibs))))

    def finished(self, part: int, seconds: float) -> None:
        self.book.done(self.pass_id, part, self.ctx.worker, seconds)

    def close(self, provenance: dict[str, Any]) -> None:
        who = self.book.close(self.pass_id)
        if set(who) - {self.ctx.worker}:
            provenance["tail_shared"] = {"parts": len(self.parts), "by_worker": who}


def help_embed(plan: ModelPlan, pass_id: str, ctx: ExecContext) -> list[UnitOutcome]:
    """An idle worker helps another's pass of ``plan`` (:mod:`evalfarm.parts`): load the model once, then embed and
    store the parts it claims until none is left. One outcome, ``skipped``, carrying what it staged (its shards are
    the owner's model's; the owner reports the units). A helper that fails gives its parts back and says why."""
    return with_staged(ctx, [_help(plan, pass_id, ctx)])


def _help(plan: ModelPlan, pass_id: str, ctx: ExecContext) -> UnitOutcome:
    from evalfarm.provenance import process_device

    t0, started = time.perf_counter(), now()
    book = ctx.parts
    done = 0
    try:
        if book is None:
            raise RuntimeError("this worker has no part book")
        provenance: dict[str, Any] = {"host": platform.node(), "code_versions": CODE_VERSIONS}
        meter = PassMeter(ctx, plan.model, f"{plan.model} · tail parts", 0)
        encoder = _load_for_embedding(ctx, plan, {"stage": Stage.LOAD}, provenance)
        provenance["device"] = process_device(ctx.options.device)
        _note_placement(ctx, provenance)
        if plan.prompts is not None:
            provenance["prompts"] = _prompts_provenance(ctx, plan, encoder)
        sibs = {s.model: s for s in plan.siblings}
        while book.join(pass_id, ctx.worker) and (got := book.claim(pass_id, ctx.worker)) is not None:
            k, (prompt, part, sib_parts) = got
            t_part = time.perf_counter()
            meter.total += len(part)
            sibling_parts = [(sibs[m], ctx.store(sibs[m], prompt), texts) for m, texts in sib_parts]
            _embed_under(ctx, plan, ctx.store(plan, prompt), encoder, prompt, part, sibling_parts, meter, provenance)
            book.done(pass_id, k, ctx.worker, time.perf_counter() - t_part)
            done += 1
    except Exception as exc:
        if book is not None:
            book.release(ctx.worker)  # its running part goes back to the owner
        log.warning("%s: helping with pass %s failed (%s: %s)", plan.model, pass_id, type(exc).__name__, exc)
        detail = f"tail helper: {type(exc).__name__}: {exc}"
    else:
        detail = f"tail helper: {done} part(s)"
    ctx._model_rows.clear()  # the owner writes the model's row
    return UnitOutcome(plan.model, "", Status.SKIPPED, time.perf_counter() - t0, detail=detail, started_at=started)


EMBED_SHARD_TEXTS = 20_000
"""A model embeds its missing texts in parts of this many, each stored as its own shard as soon as it is embedded:
an interrupted embedding (a lost worker, a stopped nightly, a session's end) keeps every finished part, and the
rerun embeds only the rest. On the 2-core machine all-mpnet-base-v2's forward pass with its pooling and layer
siblings took 2,729 s for 73,665 texts on one worker (the nightly zoo run), so the full-data default's ~176k would
run ~1.8 h in one piece; a part of 20,000 texts is a few minutes of a MiniLM-size encoder on one CPU core, seconds
on a GPU, and ~10 shards a model at full data."""


PART_TEXTS_ENV = "EVALFARM_EMBED_PART_TEXTS"
"""Overrides :data:`EMBED_SHARD_TEXTS` (a positive integer): the tests' many small parts, or coarser parts where a
model is fast. It changes which texts share a part, so store runs that must give the same bytes with the same value."""


def part_texts() -> int:
    """Texts per part: :data:`PART_TEXTS_ENV` when set, else :data:`EMBED_SHARD_TEXTS`."""
    raw = os.environ.get(PART_TEXTS_ENV, "").strip()
    if not raw:
        return EMBED_SHARD_TEXTS
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"{PART_TEXTS_ENV}={raw!r}: give a positive number of texts")
    return int(raw)


def shard_parts(
    missing: list[str], siblings: list[tuple[ModelPlan, TextStore, list[str]]]
) -> Iterator[tuple[list[str], list[tuple[ModelPlan, TextStore, list[str]]]]]:
    """``missing`` in parts of :func:`part_texts` texts (first-appearance order), each with the pooling siblings'
    missing texts that fall in it; then the siblings' texts the model itself does not lack, as a last part of its
    own (empty ``missing`` part)."""
    step = part_texts()
    for lo in range(0, len(missing), step):
        part = missing[lo : lo + step]
        inside = set(part)
        yield part, [(s, st, got) for s, st, texts in siblings if (got := [t for t in texts if t in inside])]
    own = set(missing)
    rest = [(s, st, got) for s, st, texts in siblings if (got := [t for t in texts if t not in own])]
    if rest:
        yield [], rest


def _publish_siblings(
    ctx: ExecContext,
    plan: ModelPlan,
    shared: list[tuple[ModelPlan, TextStore, list[str], Encoded]],
    provenance: dict[str, Any],
) -> None:
    """Store what the leader's forward pass pooled for its siblings; a sibling that cannot be stored embeds on
    its own (its own embed task finds the texts missing)."""
    for sib, sib_store, sib_texts, sib_out in shared:
        try:
            sib_spec = sib.spec
            layer = {} if sib_spec.option("layer") is None else {"layer": sib_spec.option("layer")}
            leaders = {k: v for k, v in provenance.items() if k != "layer"}  # the leader's layer is not the sibling's
            _publish(
                ctx, sib, sib_store, sib_texts, check_quality(sib_texts, sib_out),
                {**leaders, "pooling": sib_spec.option("pooling"), **layer, "forward_pass_of": plan.model},
            )  # fmt: skip
        except Exception as exc:  # the sibling's own embed task computes it
            log.warning(
                "%s: could not store pooling sibling %s (%s); it embeds on its own", plan.model, sib.model, exc
            )


def _embed_from_base(
    ctx: ExecContext,
    plan: ModelPlan,
    postprocess: PostProcess,
    work: Work,
    state: dict[str, Stage],
    provenance: dict[str, Any],
) -> list[Encoded]:
    """A post-processed sentence model over its base's stored vectors: the base embeds the texts and the fit
    task's (reusing its store; each under its prompt), the transform is fitted on the fit task's (a transform that
    fits nothing: truncate, binary, on none) and applied to each group's missing texts."""
    from evalfarm.encoders.postprocess import fit_postprocess

    wanted: dict[Prompt, list[str]] = {prompt: list(missing) for prompt, _, missing in work}
    fit_task = postprocess.fit_on or DEFAULT_SENTENCE_FIT_TASK
    fit_prompt, fit_at = NO_PROMPT, 0
    if postprocess.fits:  # the fit task's texts as the base embeds them for that task
        ((fit_prompt, fit_texts), *_) = ctx.prompted_texts(plan, fit_task)
        fit_at = len(wanted.get(fit_prompt, []))
        wanted[fit_prompt] = [*wanted.get(fit_prompt, []), *fit_texts]
    base_vectors = {prompt: _base_vectors(ctx, plan, texts, prompt) for prompt, texts in wanted.items()}
    state["stage"] = Stage.EMBED
    fit_oov: np.ndarray | None = None
    fit_rows: np.ndarray | None = None
    if postprocess.fits:
        fit_emb, fit_oov = (a[fit_at:] for a in base_vectors[fit_prompt])
        fit_rows = fit_emb[~fit_oov]
    transform = fit_postprocess(fit_rows, postprocess)
    outs = []
    for prompt, _, missing in work:
        base_emb, base_oov = base_vectors[prompt]
        out = Encoded(transform.apply(base_emb[: len(missing)]), base_oov[: len(missing)].copy())
        out.emb[out.oov] = 0.0
        outs.append(check_quality(missing, out))
    provenance["postprocess"] = postprocess.record()
    if fit_oov is not None:
        provenance["fit_on"] = {"task": fit_task, "texts": int((~fit_oov).sum()), "base": plan.base_lineage[0].id}
    return outs


def _load_for_embedding(ctx: ExecContext, plan: ModelPlan, state: dict[str, Stage], provenance: dict[str, Any]) -> Any:
    """Load the model (or take the object handed to :func:`evalfarm.evaluate`), once for all its parts; a derived
    model that loads its base its own way is fitted here."""
    from evalfarm.encoders._torch import encoder_device
    from evalfarm.encoders.loader import SentencePostProcessed, load_encoder

    t_load = time.perf_counter()
    if plan.model in ctx.encoders:  # an object handed to evalfarm.evaluate()
        encoder = ctx.encoders[plan.model]
        provenance["python_object"] = type(encoder).__module__ + "." + type(encoder).__qualname__
    else:
        with encoder_device(ctx.options.device):  # --device: where the encoders run too
            encoder = load_encoder(plan.lineage, base_dir=ctx.catalog.path.parent)
    provenance.update(getattr(encoder, "provenance", {}) or {})
    provenance["load_seconds"] = round(time.perf_counter() - t_load, 3)
    if plan.model not in ctx.encoders:  # the size its load took that long for: what the next ETA prices loads by
        from evalfarm.encoders.sources import source_bytes

        provenance["source_bytes"] = source_bytes(plan.lineage)
    state["stage"] = Stage.EMBED
    if isinstance(encoder, SentencePostProcessed):  # a derived model that loads its base its own way
        if not encoder.postprocess.fits:
            encoder.fit(None)
            return encoder
        fit_task = encoder.postprocess.fit_on or DEFAULT_SENTENCE_FIT_TASK  # the spec's, as loaded
        ((fit_prompt, fit_texts), *_) = ctx.prompted_texts(plan, fit_task)
        base = with_prompt(encoder.base, fit_prompt if plan.prompts is not None else None)
        encoder.fit(encode_texts(base, fit_texts).emb)
        provenance["fit_on"] = {"task": fit_task}
    return encoder


_RUN_ONLY_PROVENANCE = (
    "host", "device", "load_seconds", "source_bytes", "code_versions", "batching", "placement", "tail_shared"
)  # fmt: skip
"""Provenance of how a model ran (where, how long and loading how many bytes, how it was batched, placed and
shared), not of what made its
vectors: in the ``models`` row, never in a shard's metadata (whose bytes depend on content only)."""


def _publish(
    ctx: ExecContext, plan: ModelPlan, store: TextStore, texts: list[str], out: Encoded, provenance: dict[str, Any]
) -> None:
    """Write a model's new shard, an informational row for its all-zero vectors, and its ``models`` row."""
    # the shard keeps what made its vectors (deterministic: no host, no timing); the models row keeps everything
    content = {k: v for k, v in provenance.items() if k not in _RUN_ONLY_PROVENANCE}
    meta = {"model": plan.model, "spec_hash": plan.spec_hash, "store": plan.store, "provenance": content}
    store.write(texts, out, meta)
    ctx._model_rows[plan.model] = _model_row(ctx, plan, int(out.emb.shape[1]), provenance)  # written with the job
    if out.zero_count:  # informational: these texts are handled as OOV
        ctx.warehouse.write_failure(
            ctx.run_id,
            plan.model,
            None,
            str(Stage.EMBED_QUALITY),
            f"{out.zero_count} all-zero vectors (handled as OOV under policy {plan.spec.oov!r})",
        )


def _sibling_work(ctx: ExecContext, plan: ModelPlan) -> dict[Prompt, list[tuple[ModelPlan, TextStore, list[str]]]]:
    """The pooling siblings (``plan.share_forward_passes``) whose stores lack some of their tasks' texts, by the
    prompt they are embedded under (siblings share the leader's prompts: they are part of the forward key). A sibling
    whose texts cannot be listed is left to its own embed task; under ``--force`` every model embeds on its own."""
    work: dict[Prompt, list[tuple[ModelPlan, TextStore, list[str]]]] = {}
    for sib in [] if ctx.force else plan.siblings:
        try:
            groups: dict[Prompt, dict[str, None]] = {}
            for u in sib.units:
                for prompt, texts in ctx.prompted_texts(sib, u.task):
                    groups.setdefault(prompt, {}).update(dict.fromkeys(texts))
            found = []
            for prompt, wanted in groups.items():
                sib_store = ctx.store(sib, prompt)
                if missing := sib_store.missing(list(wanted)):
                    found.append((prompt, (sib, sib_store, missing)))
        except Exception as exc:
            log.warning("%s: pooling sibling %s left to its own embed task (%s)", plan.model, sib.model, exc)
            continue
        for prompt, item in found:
            work.setdefault(prompt, []).append(item)
    return work


def _encode_with_siblings(
    ctx: ExecContext,
    plan: ModelPlan,
    encoder: Any,  # a transformer encoder: its pooling, encode_poolings
    missing: list[str],
    siblings: list[tuple[ModelPlan, TextStore, list[str]]],
    progress: Callable[[int], None] | None = None,
) -> tuple[Encoded, list[tuple[ModelPlan, TextStore, list[str], Encoded]]]:
    """One forward pass over the texts the model and its siblings lack, pooled each sibling's way. The model's own
    vectors are checked here (a failure is its own); each sibling's when it is stored."""
    union = list(dict.fromkeys([*missing, *(t for _, _, texts in siblings for t in texts)]))
    own = getattr(encoder, "pooling_key", encoder.pooling)
    sibling_pooling = {s.model: _pooling(s) for s, _, _ in siblings}
    poolings = list(dict.fromkeys([own, *sibling_pooling.values()]))
    arrays = encode_poolings(encoder, union, poolings, progress=progress)
    row = {t: i for i, t in enumerate(union)}

    # each pooling's full array is dropped once the last model using it has its rows: a family of 21 members over
    # ~58k texts at 768 dims holds ~3.8 GB of arrays, and copying them all before freeing any would double that
    users = Counter([own, *(sibling_pooling[s.model] for s, _, _ in siblings)])

    def take(pooling: str, texts: list[str]) -> Encoded:
        got = Encoded(arrays[pooling][[row[t] for t in texts]], np.zeros(len(texts), dtype=bool))
        users[pooling] -= 1
        if not users[pooling]:
            del arrays[pooling]
        return got

    out = check_quality(missing, take(own, missing))
    shared = [(s, st, texts, take(sibling_pooling[s.model], texts)) for s, st, texts in siblings]
    return out, shared


def _pooling(plan: ModelPlan) -> str:
    """A pooling sibling's pooling key (``mean``, ``cls@3``): plan.share_forward_passes groups only models that name
    a pooling."""
    spec = plan.spec
    pooling, layer = spec.option("pooling"), spec.option("layer")
    if pooling is None:
        raise ValueError(f"model {plan.model!r} shares a forward pass but names no pooling")
    return str(pooling) if layer is None else f"{pooling}@{layer}"


def _base_vectors(
    ctx: ExecContext, plan: ModelPlan, texts: list[str], prompt: Prompt = NO_PROMPT
) -> tuple[np.ndarray, np.ndarray]:
    """The base model's vectors of ``texts`` under ``prompt`` (``plan`` is the derived model's: its lineage holds
    the base's), embedding (and storing) the ones the base's store lacks."""
    from evalfarm.encoders._torch import encoder_device
    from evalfarm.encoders.loader import load_encoder

    chain = plan.base_lineage
    base = chain[0].id
    store = TextStore(ctx.warehouse, base, plan.base_store_for(prompt))
    missing = store.missing(texts)
    if missing:
        with encoder_device(ctx.options.device):
            encoder = load_encoder(chain, base_dir=ctx.catalog.path.parent)
        out = encode_texts(with_prompt(encoder, prompt if plan.prompts is not None else None), missing)
        store.write(missing, out, {"model": base, "spec_hash": spec_hash(*chain), "store": store.key})
    emb, oov, _ = store.vectors(texts)
    return emb, oov


def _model_row(ctx: ExecContext, plan: ModelPlan, dim: int | None, provenance: dict[str, Any]) -> dict[str, Any]:
    spec, chain = plan.spec, plan.lineage
    return {
        "model": plan.model,
        "level": spec.level,
        "kind": plan.kind,
        "dim": dim,
        "spec_hash": plan.spec_hash,
        "base": spec.base,
        "pooling": spec.option("pooling"),
        "postprocess": spec.postprocess.record_json() if spec.postprocess else None,
        "source": next((s.source.model_dump_json() for s in chain if s.source), None),
        "provenance": json.dumps(provenance, default=str),
        "spec": json.dumps([s.model_dump(mode="json") for s in chain]),
        "run_id": ctx.run_id,
        "created_at": now(),
    }


# ---- score ------------------------------------------------------------------------------------------------------
def score_unit(plan: ModelPlan, unit: Unit, ctx: ExecContext) -> UnitOutcome:
    """Score stage of one unit: read the task's vectors from the model's store, run the scorer, write detail tables,
    then metrics (the completion marker). Runs anywhere the warehouse is visible: a GPU worker, a CPU task. In a
    deferred warehouse the unit's staged files travel on the outcome (``staged``)."""
    return with_staged(ctx, [_score_unit(plan, unit, ctx)])[0]


def _score_unit(plan: ModelPlan, unit: Unit, ctx: ExecContext) -> UnitOutcome:
    t0 = time.perf_counter()
    started = now()
    try:
        task = ctx.catalog.task(unit.task)
        scorer = scorer_for(task.kind)
        data = ctx.task_data(unit.task)
    except Exception as exc:
        return _fail(ctx, failed(unit.model, unit.task, Stage.TASK, exc, t0, started))
    try:
        from evalfarm.device import check_device
        from evalfarm.provenance import thread_counts

        check_device(ctx.options.device)  # a missing GPU fails here, once per worker, and is not retried
        threads = thread_counts()  # recorded in the unit's `units` row (issue 23.5)
        vectors = task_vectors(
            lambda prompt: ctx.store(plan, prompt), scorer, task, data, plan.prompts,
            level=unit.level, oov_policy=plan.spec.oov, binary=is_binary(plan.spec),
        )  # fmt: skip
        emb, oov = vectors.emb, vectors.oov
        quality = assess(emb, oov)  # degenerate vectors (issue #13.4): every scorer, once per unit
        result = scorer.evaluate(task, data, vectors, json.loads(unit.params), device=ctx.options.device)
        result.details["quality"] = quality.table()
        thin = scorer.thin(result.rows, task)  # too little data to rank (issue #23.3): the scorer's declared bounds
        mark = ctx.warehouse.pending_mark()
        try:
            write_results(ctx.warehouse, ctx.run_id, unit, scorer, result, quality=quality, thin=thin)
        except BaseException:  # a unit written in part is not committed at all (its staged files stay orphans)
            ctx.warehouse.discard_pending(mark)
            raise
    except Exception as exc:
        return _fail(ctx, failed(unit.model, unit.task, Stage.SCORE, exc, t0, started))
    summary = {  # a person reads these beside the task: variants in words, rank metrics under the boards' ties
        "/".join(
            x for x in (r.subset if r.subset != "all" else "", scorer.variant_label(r.variant), r.ties or "") if x
        ): r.value
        for r in result.rows
        if r.primary and r.ties in (None, BOARD_TIES)
    }
    metrics = {r.metric for r in result.rows if r.primary and r.ties in (None, BOARD_TIES)}
    return UnitOutcome(
        unit.model, unit.task, Status.DONE, time.perf_counter() - t0, summary=summary, dim=vectors.dim,
        started_at=started, degenerate=quality.reason, thin=thin, threads=threads,
        metric=metrics.pop() if len(metrics) == 1 else None,
    )  # fmt: skip


def write_results(
    wh: Warehouse,
    run_id: str,
    unit: Unit,
    scorer: Scorer,
    result: ScoreResult,
    quality: Quality | None = None,
    thin: str | None = None,
) -> None:
    """The one place a unit's rows are written: one file per table (detail tables, ``quality``, then ``metrics``,
    its completion marker), each recorded with its unit; committed at once, or with the run's next batch in a
    deferred warehouse (the commit writes their manifest rows first, their sha256 for ``evalfarm verify``, and the
    metrics last). ``quality``: the degenerate-model check of the unit's vectors, carried on every metrics row;
    ``thin``: why the unit's numbers are too thin to rank (``Scorer.thin``), carried the same way (a flag beside
    the values, which it never changes). A row's confidence interval (``MetricRow.ci``) goes into its ``ci_*``
    columns."""
    who = (unit.model, unit.task, unit.fingerprint)
    with wh.deferring():  # the unit's files commit together (or, deferred already, with the run's batch)
        _write_unit(wh, run_id, unit, scorer, result, who, quality, thin)


def _write_unit(
    wh: Warehouse,
    run_id: str,
    unit: Unit,
    scorer: Scorer,
    result: ScoreResult,
    who: tuple[str, str, str],
    quality: Quality | None,
    thin: str | None,
) -> None:
    import pyarrow as pa

    for name, table in result.details.items():
        n = table.num_rows
        for col, value in (
            ("run_id", run_id),
            ("model", unit.model),
            ("task", unit.task),
            ("fingerprint", unit.fingerprint),
        ):
            table = table.append_column(col, pa.array([value] * n, pa.string()))
        schema = detail_schema(scorer, name)
        wh.write(name, table.select(schema.names).cast(schema), run_id=run_id, unit=who)
    created = now()
    declared = getattr(scorer, "declared_metrics", {})  # the scorer's own declarations, then evalfarm/metrics.py's
    direction = {m: lookup(m, declared, scorer=scorer.name).higher_is_better for m in {r.metric for r in result.rows}}
    rows = [
        {
            "run_id": run_id,
            "model": unit.model,
            "task": unit.task,
            "scorer": scorer.name,
            "subset": r.subset,
            "variant": r.variant,
            "ties": r.ties,
            "metric": r.metric,
            "value": float(r.value),
            "is_primary": bool(r.primary),
            "higher_is_better": direction[r.metric],  # the metric's declared direction (None: it has none)
            "fingerprint": unit.fingerprint,
            "spec_hash": unit.spec_hash,
            "task_checksum": unit.task_checksum,
            "scorer_version": scorer.version,
            "params": unit.params,
            "created_at": created,
            "degenerate": quality is not None and quality.degenerate,
            "degenerate_reason": quality.reason if quality is not None else None,
            "thin": thin is not None,
            "thin_reason": thin,
            "ci_low": r.ci.low if r.ci is not None else None,
            "ci_high": r.ci.high if r.ci is not None else None,
            "ci_method": r.ci.method if r.ci is not None else None,
        }
        for r in result.rows
    ]
    wh.write("metrics", rows, run_id=run_id, unit=who)
