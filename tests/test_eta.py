"""The ETA from the warehouse's history of unit times (issue 24): sources, embed shares, the countdown, the loader."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from evalfarm import eta
from evalfarm.eta import Estimate, Forecast, History, LivePass, PastUnit, PlannedUnit
from evalfarm.outcomes import Status
from evalfarm.scheduler.progress import ProgressTracker, fmt_seconds
from evalfarm.warehouse import Warehouse

REPO = Path(__file__).resolve().parents[1]


def _past(model: str, key: str, task: str, embed: float, score: float, texts: int | None = None, run: str = "r1",
          cost: float | None = None) -> PastUnit:  # fmt: skip
    return PastUnit(model, key, task, embed, score, texts, run, cost)


HISTORY = History(
    [
        _past("glove", "word-vectors", "evalrank-word", 8.0, 2.0, 1000),
        _past("fasttext", "word-vectors", "evalrank-word", 16.0, 4.0, 1000),
        _past("glove", "word-vectors", "wordsim", 0.5, 0.5, 100),
        _past("minilm", "transformers", "stsb", 50.0, 10.0, 3000),
    ]
)


def test_each_unit_takes_the_most_specific_source_that_knows_it() -> None:
    units = [
        PlannedUnit("glove-2", "word-vectors", "evalrank-word", 1.0),  # same kind and task: their mean
        PlannedUnit("glove-2", "word-vectors", "stsb", 1.0),  # the kind's embed rate x stsb's texts; stsb's scoring
        PlannedUnit("onnx", "onnx", "stsb", 1.0),  # a kind never seen: the static model
        PlannedUnit("onnx", "onnx", "sick", 2.0),  # nothing known
    ]
    got = eta.estimate(units, HISTORY)
    assert [e.source for e in got] == ["history", "history-task", "model", "model"]
    assert got[0].seconds == pytest.approx(15.0)
    rate = 24.5 / 2100  # word-vectors: 24.5 s of embedding over 2,100 texts
    assert got[1].seconds == pytest.approx(rate * 3000 + 10.0)
    per_cost = (15.0 + rate * 3000 + 10.0) / 2.0  # no costs in the history: calibrated on the two estimated
    assert got[2].seconds == pytest.approx(per_cost) and got[3].seconds == pytest.approx(2.0 * per_cost)
    assert eta.sources(got) == {"history": 1, "history-task": 1, "model": 2}


def test_the_kinds_embed_rate_and_the_same_kinds_scoring_make_history_kind() -> None:
    h = History([*HISTORY.units, _past("glove", "word-vectors", "stsb", 30.0, 3.0, 3000)])
    got = eta.estimate([PlannedUnit("w", "word-vectors", "sick", 1.0)], h, texts={"sick": 100})
    assert got[0].source == "built-in"  # the task's scoring is unknown (and no history cost to calibrate on)
    h = History([*h.units, _past("minilm", "transformers", "sick", 5.0, 1.0, 100)])
    got = eta.estimate([PlannedUnit("w", "word-vectors", "sick", 1.0)], h)
    rate = (24.5 + 30.0) / 5100
    assert got == [Estimate(pytest.approx(rate * 100 + 1.0), "history-task")]
    h = History([*h.units, _past("glove", "word-vectors", "sick", 9.0, 2.0, 100)])
    assert eta.estimate([PlannedUnit("w", "word-vectors", "sick", 1.0)], h)[0] == Estimate(11.0, "history")


def test_the_static_model_is_calibrated_on_the_whole_history_when_it_has_costs() -> None:
    h = History([_past("a", "bow", "t", 3.0, 1.0, cost=2.0), _past("b", "bow", "u", 1.0, 1.0, cost=1.0)])
    assert h.per_cost == pytest.approx(2.0)
    assert eta.estimate([PlannedUnit("c", "onnx", "t", 5.0)], h) == [Estimate(10.0, "model")]


def test_a_task_the_history_never_saw_scales_by_the_given_text_count() -> None:
    h = History([*HISTORY.units, _past("glove", "word-vectors", "new-task", 1.0, 2.0)])  # scoring known, no count
    unit = PlannedUnit("glove-2", "word-vectors", "new-task", 1.0)
    assert eta.estimate([unit], h)[0].source == "history"
    other = PlannedUnit("fasttext-2", "word-vectors+postprocess", "new-task", 1.0)  # a kind without a rate
    assert eta.estimate([other], h)[0].source == "built-in"


def test_a_quick_profiles_history_never_prices_a_full_data_unit() -> None:
    """Downstream units trained on the 1,000-row sample are kept apart from full-data ones by their cost variant:
    a warehouse whose history holds only quick runs gave the first full-data nightly an ETA of 18 min (issue 22)."""
    quick = [
        PastUnit("minilm", "transformers", "mr", 5.0, 2.0, 1100, variant="max_train=1000"),
        PastUnit("mpnet", "transformers", "mr", 15.0, 4.0, 1100, variant="max_train=1000"),
        PastUnit("minilm", "transformers", "stsb", 30.0, 1.0, 3000),
    ]
    h = History(quick)
    assert h.texts == {"mr@max_train=1000": 1100, "stsb": 3000}
    sample = PlannedUnit("e5", "transformers", "mr", 1.0, variant="max_train=1000")
    full = PlannedUnit("e5", "transformers", "mr", 1.0)
    got = eta.estimate([sample, full], h, texts={"mr": 10662})
    assert got[0] == Estimate(pytest.approx(10.0 + 3.0), "history")
    assert got[1].source == "model"  # the full data's scoring is unknown: not the sample's 3 s
    with_full = History([*quick, PastUnit("minilm", "transformers", "mr", 40.0, 30.0, 10662)])
    got = eta.estimate([sample, full], with_full)
    assert got[0].seconds == pytest.approx(13.0) and got[1] == Estimate(70.0, "history")
    onnx = History([*with_full.units, PastUnit("u", "onnx", "stsb", 6.0, 1.0, 3000)])  # 2 ms a text
    got = eta.estimate([PlannedUnit("e5", "onnx", "mr", 1.0)], onnx)  # the full data's texts and scoring only
    assert got == [Estimate(pytest.approx(0.002 * 10662 + 30.0), "history-task")]


def test_the_cost_variant_is_the_downstream_sample_and_nothing_else() -> None:
    params = {"max_train": 1000, "seed": 1111, "k": 10}
    assert eta.cost_variant("downstream", params) == "max_train=1000"
    assert eta.cost_variant("downstream", '{"max_train": 1000, "k": 10}') == "max_train=1000"
    assert eta.cost_variant("downstream", {**params, "max_train": None}) == ""  # the full data: plain task
    assert eta.cost_variant("evalrank", {"similarities": ["cos"]}) == ""
    assert eta.cost_variant("no-such-scorer", params) == "" and eta.cost_variant(None, params) == ""
    assert eta.cost_variant("downstream", "{not json") == ""  # a damaged row: grouped with its task
    assert eta.task_label("mr", "max_train=1000") == "mr@max_train=1000" and eta.task_label("mr") == "mr"


def test_no_history_falls_back_to_the_static_cost() -> None:
    got = eta.estimate([PlannedUnit("m", "bow", "stsb", 2.0)], History([]))
    assert got == [Estimate(2.0 * eta.DEFAULT_SECONDS_PER_COST, "built-in")]


def test_no_history_scales_the_embedding_by_the_counted_texts() -> None:
    """A fresh warehouse: the static costs are per model, but the full-data default embeds ~126k sentences per
    sentence model, so the fallback adds the unit's texts at FALLBACK_EMBED_SECONDS_PER_TEXT per unit of its
    kind's embedding cost — nothing for a model whose vectors are stored, nor for a task with no count."""
    fresh = PlannedUnit("minilm", "sentence-transformers", "mr", 2.0, embed_cost=10.0)
    stored = PlannedUnit("minilm", "sentence-transformers", "mr", 2.0, stored=True, embed_cost=10.0)
    uncounted = PlannedUnit("minilm", "sentence-transformers", "trec", 2.0, embed_cost=10.0)
    got = eta.estimate([fresh, stored, uncounted], History([]), texts={"mr": 10_662})
    static = 2.0 * eta.DEFAULT_SECONDS_PER_COST
    embed = 10.0 * 10_662 * eta.FALLBACK_EMBED_SECONDS_PER_TEXT + eta.BUILTIN_LOAD_SECONDS  # and its load, once
    assert got[0] == Estimate(pytest.approx(static + embed), "built-in") and got[0].embed == pytest.approx(embed)
    assert got[1] == got[2] == Estimate(static, "built-in")
    assert got[0].seconds > 70.0  # ~71 s of embedding for MR's 10,662 sentences: not the static 18 s


def test_a_unit_counts_once_with_its_newest_scoring_and_its_largest_embedding() -> None:
    h = History([_past("glove", "wv", "t", 90.0, 10.0, run="old"), _past("glove", "wv", "t", 0.0, 2.0, run="new")])
    assert len(h) == 1 and (h.embed_kt[("wv", "t")], h.score_kt[("wv", "t")]) == (90.0, 2.0)  # "new": a rerun


def test_a_model_with_stored_vectors_is_estimated_without_embedding() -> None:
    fresh, stored = (PlannedUnit("glove-2", "word-vectors", "evalrank-word", 1.0, s) for s in (False, True))
    assert [e.seconds for e in eta.estimate([fresh, stored], HISTORY)] == [pytest.approx(15.0), pytest.approx(3.0)]
    assert eta.estimate([stored], HISTORY)[0].source == "history"


def test_a_partly_stored_model_is_estimated_with_the_share_left_to_embed() -> None:
    """A run stopped mid-model keeps the parts it embedded (execute.EMBED_SHARD_TEXTS): the resumed nightly's
    all-mpnet-base-v2 family was estimated as if nothing were left to embed."""
    quarter = PlannedUnit("glove-2", "word-vectors", "evalrank-word", 1.0, 0.25)
    assert eta.estimate([quarter], HISTORY)[0] == Estimate(pytest.approx(12.0 * 0.75 + 3.0), "history")
    kind_rate = PlannedUnit("glove-2", "word-vectors", "stsb", 1.0, 0.5)  # the kind's rate x the texts left
    assert eta.estimate([kind_rate], HISTORY)[0].seconds == pytest.approx(24.5 / 2100 * 3000 * 0.5 + 10.0)
    unseen = PlannedUnit("m", "bow", "t", 2.0, 0.5, embed_cost=10.0)
    fallback = 2.0 * eta.DEFAULT_SECONDS_PER_COST + 10.0 * 1000 * 0.5 * eta.FALLBACK_EMBED_SECONDS_PER_TEXT
    fallback += eta.BUILTIN_LOAD_SECONDS
    assert eta.estimate([unseen], History([]), texts={"t": 1000}) == [Estimate(pytest.approx(fallback), "built-in")]


def test_a_models_embed_seconds_are_spread_over_its_tasks_by_text_count() -> None:
    rows = [
        {"run_id": "r", "model": "m", "task": "a", "embed_s": 30.0, "score_s": 1.0, "texts": 100, "kind": "onnx"},
        {"run_id": "r", "model": "m", "task": "b", "embed_s": 0.0, "score_s": 2.0, "texts": 200, "kind": "onnx"},
        {"run_id": "r", "model": "p", "task": "a", "embed_s": 4.0, "score_s": 1.0, "texts": None, "kind": "onnx",
         "post": True},
        {"run_id": "r", "model": "p", "task": "b", "embed_s": 0.0, "score_s": 1.0, "texts": 200, "kind": "onnx",
         "post": True},
    ]  # fmt: skip
    got = {(u.model, u.task): u for u in eta.history_rows(rows, lambda r, n: 1.0 / n)}
    assert (got[("m", "a")].embed, got[("m", "a")].score) == (pytest.approx(10.0), 1.0)
    assert got[("m", "b")].seconds == pytest.approx(22.0) and got[("m", "b")].cost == 0.5
    assert got[("p", "a")].seconds == pytest.approx(3.0)  # a count unknown: equal shares
    assert got[("p", "a")].key == "onnx+postprocess" and got[("m", "a")].key == "onnx"


def test_the_first_estimate_divides_over_workers_but_never_below_the_largest_model() -> None:
    est = {("a", "t1"): Estimate(30.0, "history"), ("a", "t2"): Estimate(30.0, "history"),
           ("b", "t1"): Estimate(20.0, "history"), ("c", "t1"): Estimate(10.0, "history")}  # fmt: skip
    assert Forecast(dict(est), workers=1).total == pytest.approx(90.0)
    assert Forecast(dict(est), workers=2).total == pytest.approx(60.0)  # model a alone takes 60 s
    assert Forecast(dict(est), workers=3).total == pytest.approx(60.0)


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_the_eta_counts_down_and_a_finished_model_corrects_the_rest() -> None:
    clock = Clock()
    est = {("a", "t1"): Estimate(10.0, "history"), ("a", "t2"): Estimate(10.0, "history"),
           ("b", "t1"): Estimate(40.0, "history")}  # fmt: skip
    fc = Forecast(est, workers=1, clock=clock)
    assert fc.eta() == pytest.approx(60.0)
    clock.t = 15.0
    assert fc.eta() == pytest.approx(60.0)  # nothing began: the clock never eats work nobody does
    fc.begin("a", "t1")
    clock.t = 20.0
    assert fc.eta() == pytest.approx(55.0)  # counting down while the first unit runs
    fc.finish("a", "t1", 30.0)  # 30 s for a predicted 10: what is left is longer, shrunk towards 1 (little known)
    ratio = (30.0 + eta.SHRINK_REST_S) / (10.0 + eta.SHRINK_REST_S)
    assert fc.rest_ratio() == pytest.approx(ratio) and fc.eta() == pytest.approx(50.0 * ratio)
    fc.finish("a", "t2", 10.0)
    ratio = (40.0 + eta.SHRINK_REST_S) / (20.0 + eta.SHRINK_REST_S)
    assert fc.eta() == pytest.approx(40.0 * ratio) and fc.ratio() == pytest.approx(ratio)
    clock.t = 200.0
    assert fc.eta() == pytest.approx(40.0 * ratio)  # b has not begun: its whole estimate is left
    fc.begin("b", "t1")
    clock.t = 400.0
    assert fc.eta() == 1.0  # b is late: never 0 while a unit is left
    fc.finish("b", "t1", None)
    assert fc.eta() == 0.0


def test_the_eta_never_runs_down_with_everything_to_do() -> None:
    """Seen in every slow run: once the elapsed time passed the estimate, the line read ``ETA 1s`` with 0 of 128k
    texts embedded and 64 of 64 units left. Work that has not begun keeps its estimate; a model loading counts only
    its load down; a model embedding is its texts left at its own rate."""
    clock = Clock()
    est = {(m, "t"): Estimate(110.0, "built-in", embed=100.0, load=20.0) for m in ("m1", "m2", "m3", "m4")}
    fc = Forecast(est, workers=2, clock=clock, start_up=30.0)
    assert fc.total == pytest.approx(30.0 + 220.0)
    clock.t = 10.0
    assert fc.eta() == pytest.approx(20.0 + 220.0)  # Ray starting: its start-up counts down
    clock.t = 100.0
    assert fc.eta() == pytest.approx(220.0)  # a late start-up: the work is all left, never less
    fc.begin("m1")
    fc.begin("m2")
    fc.observe({"m1": LivePass(0, 10_000, 0.0, loading=True), "m2": LivePass(0, 10_000, 0.0, loading=True)})
    clock.t = 110.0
    assert fc.eta() == pytest.approx((10.0 + 90.0) * 2 / 2 + 110.0 * 2 / 2)  # loads 10 s left each, the rest waits
    clock.t = 1000.0
    assert fc.eta() == pytest.approx((80.0 + 10.0) * 2 / 2 + 110.0 * 2 / 2)  # loads late: texts and scoring left
    fc.observe({"m1": LivePass(1000, 10_000, 900.0), "m2": LivePass(0, 10_000, 900.0, loading=True)})
    clock.t = 1010.0
    fc.observe({"m1": LivePass(2000, 10_000, 910.0), "m2": LivePass(0, 10_000, 910.0, loading=True)})
    m1 = 8000 * 10.0 / 1000 + 10.0  # its texts left at 1,000 per 10 s, then its scoring
    k = fc.embed_ratios()[0]["?"]  # 10 s measured for a predicted 8: the others' texts a little longer
    assert k > 1.0 and fc.eta() == pytest.approx((m1 + (80.0 * k + 10.0) + 2 * (20.0 + 80.0 * k + 10.0)) / 2)


def test_a_small_model_ten_times_its_estimate_does_not_make_an_encoder_ten_times_longer() -> None:
    """The README's subset run: GloVe's one unit took 6.4 s for a predicted 0.6 s, and the old correction (the
    finished models' actual / predicted) then said 45 min for MiniLM's 4 min."""
    fc = Forecast(
        {("glove", "rg65"): Estimate(0.6, "built-in", embed=0.5),
         ("minilm", "evalrank"): Estimate(160.0, "built-in", embed=150.0),
         ("minilm", "stsb"): Estimate(110.0, "built-in", embed=100.0)},
        workers=2, keys={"glove": "word-vectors", "minilm": "sentence-transformers"}, clock=Clock(),
    )  # fmt: skip
    before = fc.eta()
    fc.finish("glove", "rg65", 6.4)
    assert before == pytest.approx(270.0) and fc.eta() < 1.2 * before


def test_a_pass_being_embedded_is_timed_by_its_own_rate() -> None:
    clock = Clock()
    fc = Forecast({("enc", "t"): Estimate(110.0, "built-in", embed=100.0)}, keys={"enc": "k"}, clock=clock)
    clock.t = 2.0
    fc.observe({"enc": LivePass(done=1000, total=10_000, seconds=2.0)})  # its first texts: no rate yet
    assert fc.eta() == pytest.approx(100.0 * 0.9 + 10.0)  # the estimate of the texts left, and the scoring
    clock.t = 22.0
    fc.observe({"enc": LivePass(done=2000, total=10_000, seconds=22.0)})  # 1,000 texts in 20 s since its first
    assert fc.eta() == pytest.approx(8000 * 0.02 + 10.0)  # 160 s for the 8,000 left
    clock.t = 25.0
    assert fc.eta() == pytest.approx(170.0)  # between two reports (a second apart) it stands
    fc.observe({"enc": LivePass(done=10_000, total=10_000, seconds=200.0, finished=True)}, embedded={"enc"})
    assert fc.eta() == pytest.approx(10.0)  # scoring is left


def test_a_kinds_measured_rate_corrects_its_models_not_started_yet() -> None:
    est = {(m, "t"): Estimate(50.0, "built-in", embed=50.0) for m in ("enc1", "enc2", "glove")}
    fc = Forecast(est, keys={"enc1": "k", "enc2": "k", "glove": "w"}, clock=Clock())
    fc.observe({"enc1": LivePass(done=100, total=100, seconds=100.0, finished=True)}, embedded={"enc1"})
    kinds, overall = fc.embed_ratios()
    assert overall == pytest.approx((100.0 + eta.SHRINK_RUN_S) / (50.0 + eta.SHRINK_RUN_S))
    assert kinds["k"] == pytest.approx((100.0 + eta.SHRINK_KIND_S * overall) / (50.0 + eta.SHRINK_KIND_S))
    assert fc.remaining() == pytest.approx(50.0 * kinds["k"] + 50.0 * overall)  # enc2 by its kind, glove by the run
    fc.observe({"enc1": LivePass(done=100, total=100, seconds=1e6, finished=True)}, embedded={"enc1"})
    assert fc.embed_ratios()[0]["k"] == eta.RATIO_BOUNDS[1]  # never more than 5x


def test_failed_units_leave_the_calibration() -> None:
    fc = Forecast({("a", "t1"): Estimate(10.0, "history"), ("a", "t2"): Estimate(10.0, "history"),
                   ("b", "t1"): Estimate(10.0, "history")}, workers=1)  # fmt: skip
    fc.finish("a", "t1", None)
    fc.finish("a", "t2", 20.0)
    assert fc.rest_ratio() == pytest.approx((20.0 + eta.SHRINK_REST_S) / (10.0 + eta.SHRINK_REST_S))


def test_the_progress_line_shows_the_forecasts_eta_before_any_unit() -> None:
    clock = Clock()
    tracker = ProgressTracker(total=2, cost_total=2.0)
    assert " · ETA ? · " in tracker.line()
    tracker.forecast = Forecast(
        {("a", "t"): Estimate(90.0, "history"), ("b", "t"): Estimate(30.0, "history")}, clock=clock
    )
    assert " · ETA 2m00s · " in tracker.line()
    tracker.workers = 2  # live workers: model a alone takes 90 s
    assert " · ETA 1m30s · " in tracker.line()
    tracker.finish(Status.DONE, 1.0, unit=("b", "t"), seconds=15.0)
    ratio = (15.0 + eta.SHRINK_REST_S) / (30.0 + eta.SHRINK_REST_S)  # b took half its estimate: a will be shorter
    assert f" · ETA {fmt_seconds(90.0 * ratio)} · " in tracker.line()


def _write_history(wh: Warehouse) -> None:
    at = datetime(2026, 11, 25, tzinfo=UTC)
    wh.init()
    wh.write_model({"model": "glove", "level": "word", "kind": "word-vectors", "spec_hash": "h1", "created_at": at})
    rows = []
    for task, texts, embed, score in (("evalrank-word", 900, 12.0, 3.0), ("wordsim", 100, 0.0, 0.5)):
        rows += [
            {"model": "glove", "task": task, "stage": "embed", "seconds": embed, "status": "done", "started_at": at},
            {"model": "glove", "task": task, "stage": "score", "seconds": score, "status": "done", "started_at": at,
             "fingerprint": f"fp-{task}"},
        ]  # fmt: skip
        wh.write("quality", [{"model": "glove", "task": task, "n_texts": texts, "fingerprint": f"fp-{task}"}])
        wh.write("metrics", [{"model": "glove", "task": task, "scorer": "s", "metric": "m", "value": 1.0,
                              "fingerprint": f"fp-{task}", "created_at": at}])  # fmt: skip
    rows.append({"model": "glove", "task": "x", "stage": "plan", "seconds": 0.0, "status": "skipped"})
    wh.write_units("r1", [{"run_id": "r1", **r} for r in rows])


def test_load_history_reads_the_units_view_with_kinds_and_text_counts(tmp_path) -> None:
    wh = Warehouse(tmp_path / "wh")
    _write_history(wh)
    got = {u.task: u for u in eta.load_history(wh)}
    assert set(got) == {"evalrank-word", "wordsim"}  # a skipped unit has no time
    assert got["evalrank-word"].seconds == pytest.approx(12.0 * 0.9 + 3.0)
    assert got["wordsim"].seconds == pytest.approx(12.0 * 0.1 + 0.5)
    assert got["wordsim"].key == "word-vectors" and got["wordsim"].texts == 100
    assert got["wordsim"].cost == pytest.approx(eta.static_cost("word-vectors", "word", "s", False, 2))
    assert eta.load_history(wh, exclude_run="r1") == []
    assert eta.load_history(Warehouse(tmp_path / "none")) == []  # nothing there: no history, no error


def test_the_planner_reads_its_history_loads_and_start_ups_on_one_connection(tmp_path) -> None:
    from evalfarm.runner import _OneConnection

    wh = Warehouse(tmp_path / "wh")
    _write_history(wh)
    views = _OneConnection(wh)
    got = eta.load_history(views)
    assert len(got) == 2 and got == eta.load_history(wh)
    assert eta.load_loads(views) == eta.load_loads(wh) == []  # no load recorded in this history
    assert eta.start_up_seconds(views, "local-ray") == (eta.BUILTIN_START_UP_S["local-ray"], "built-in")
    views.close()


def test_loads_and_start_ups_are_read_from_what_runs_recorded(tmp_path) -> None:
    import json

    at = datetime(2026, 11, 25, tzinfo=UTC)
    wh = Warehouse(tmp_path / "wh")
    wh.init()
    prov = json.dumps({"load_seconds": 47.5, "source_bytes": 57_000_000})
    wh.write_model({"model": "spacy", "level": "word", "kind": "word-vectors", "spec_hash": "h", "created_at": at,
                    "provenance": prov})  # fmt: skip
    starts = (("local-ray", 80.0), ("local-ray", 60.0), ("cluster", 3.0), (None, None))
    for i, (where, seconds) in enumerate(starts):  # the last: a run that started nothing records a null start-up
        summary = json.dumps({"start_up": {"where": where, "seconds": seconds} if where else None})
        wh.write_run_event(f"r{i}", "start", status="running", n_units=1)
        wh.write_run_event(f"r{i}", "end", status="ok", n_units=1, summary=summary)
    (load,) = eta.load_loads(wh)
    assert load == eta.PastLoad("spacy", "word-vectors", 47.5, 57_000_000)
    h = History([], [load])
    assert h.load("spacy", "word-vectors", None) == 47.5  # the model itself
    assert h.load("glove", "word-vectors", 114_000_000) == pytest.approx(95.0)  # its kind, by size
    assert h.load("glove", "word-vectors", None) == 47.5 and h.load("m", "onnx", 10) is None
    # a word model's estimate carries its load (it did not: GloVe's 400k vectors read `ETA 1s` for minutes)
    unit = PlannedUnit("glove", "word-vectors", "wordsim-rg-65", 0.02, embed_cost=0.02, load_bytes=114_000_000)
    (e,) = eta.estimate([unit], h, texts={"wordsim-rg-65": 49})
    assert e.load == pytest.approx(95.0) and e.seconds >= e.embed >= e.load
    (fresh,) = eta.estimate([unit], History([]), texts={"wordsim-rg-65": 49})  # nothing loaded yet: by its size
    assert fresh.load == pytest.approx(eta.builtin_load("word-vectors", 114_000_000)) == pytest.approx(11.4)
    assert eta.start_up_seconds(wh, "local-ray") == (80.0, "history")  # the median of the newest ones
    assert eta.start_up_seconds(wh, "cluster") == (3.0, "history") and eta.start_up_seconds(wh, "local")[0] == 0.0


def test_load_history_keys_downstream_units_on_their_training_sample(tmp_path) -> None:
    """A quick-profile run and a full-data run of one (model, task) are two history units, each with its own text
    count (the unit's ``quality`` row) and scoring time."""
    at = datetime(2026, 11, 25, tzinfo=UTC)
    wh = Warehouse(tmp_path / "wh")
    wh.init()
    wh.write_model({"model": "m", "level": "sentence", "kind": "transformers", "spec_hash": "h", "created_at": at})
    for run, max_train, texts, embed, score in (("quick", 1000, 1100, 4.0, 2.0), ("full", None, 10662, 40.0, 30.0)):
        fp = f"fp-{run}"
        params = '{"k":10,"max_train":%s}' % ("null" if max_train is None else max_train)
        wh.write("quality", [{"run_id": run, "model": "m", "task": "mr", "n_texts": texts, "fingerprint": fp}])
        wh.write("metrics", [{"run_id": run, "model": "m", "task": "mr", "scorer": "downstream", "metric": "accuracy",
                              "variant": run, "value": 0.7, "params": params, "fingerprint": fp,
                              "created_at": at}])  # fmt: skip
        wh.write_units(run, [
            {"run_id": run, "model": "m", "task": "mr", "stage": "embed", "seconds": embed, "status": "done",
             "started_at": at},
            {"run_id": run, "model": "m", "task": "mr", "stage": "score", "seconds": score, "status": "done",
             "started_at": at, "fingerprint": fp},
        ])  # fmt: skip
    got = {u.run_id: u for u in eta.load_history(wh)}
    assert got["quick"].variant == "max_train=1000" and got["quick"].texts == 1100
    assert got["full"].variant == "" and got["full"].texts == 10662
    h = History(list(got.values()))
    assert len(h) == 2 and h.score_t == {"mr@max_train=1000": 2.0, "mr": 30.0}


def test_a_recomputed_units_earlier_runs_keep_its_variant_and_text_count(tmp_path) -> None:
    """``run --force`` rewrites a unit's metrics and quality files under the same fingerprint with the new run's id:
    the earlier run's timing must still read the unit's params and text count, through the fingerprint."""
    at = datetime(2026, 11, 25, tzinfo=UTC)
    wh = Warehouse(tmp_path / "wh")
    wh.init()
    wh.write_model({"model": "m", "level": "sentence", "kind": "transformers", "spec_hash": "h", "created_at": at})
    fp = "fp-quick"
    for run in ("r1", "r2"):  # the second run computes the unit again, under the same fingerprint
        wh.write("quality", [{"run_id": run, "model": "m", "task": "mr", "n_texts": 1100, "fingerprint": fp}])
        wh.write("metrics", [{"run_id": run, "model": "m", "task": "mr", "scorer": "downstream", "metric": "accuracy",
                              "variant": "max_train=1000", "value": 0.7, "params": '{"max_train":1000}',
                              "fingerprint": fp, "created_at": at}])  # fmt: skip
        wh.write_units(run, [
            {"run_id": run, "model": "m", "task": "mr", "stage": "score", "seconds": 2.0, "status": "done",
             "started_at": at, "fingerprint": fp},
        ])  # fmt: skip
    got = eta.load_history(wh)
    expected = [("r1", "max_train=1000", 1100), ("r2", "max_train=1000", 1100)]
    assert [(u.run_id, u.variant, u.texts) for u in got] == expected


@pytest.mark.slow
def test_a_second_run_estimates_from_the_first(tmp_path, toy_glove) -> None:
    from evalfarm.runner import run_catalog

    cat = tmp_path / "cat.yaml"
    cat.write_text(
        f"include: [{REPO / 'catalog' / 'tasks.yaml'}]\ntasks: [wordsim-rg-65, wordsim-ws353-all]\nmodels:\n"
        "  - {id: toy, level: word, kind: word-vectors, format: glove-text,\n"
        f"     source: {{type: path, ref: {toy_glove}}}}}\n"
    )
    first: list[str] = []
    run_catalog(
        cat, tmp_path / "wh", executor="local", on_event=lambda e: first.append(e.message) if e.kind == "eta" else None
    )
    second: list[str] = []
    summary = run_catalog(
        cat, tmp_path / "wh", executor="local", force=True,
        on_event=lambda e: second.append(e.message) if e.kind == "eta" else None,
    )  # fmt: skip
    assert summary.ok
    assert len(first) == 1 and "for 2 units" in first[0] and "from built-in rates per model kind" in first[0]
    assert len(second) == 1 and "from this warehouse's timings of the same kinds and tasks" in second[0]


@pytest.mark.slow
def test_the_first_run_counts_each_levels_distinct_texts(tmp_path, toy_glove) -> None:
    """Without history the run counts its tasks' distinct texts for the first ETA, each level's counts scaled by its
    share of distinct texts (words two word-similarity sets share are embedded once)."""
    from evalfarm.options import RunRequest
    from evalfarm.runner import Run
    from evalfarm.scorers import scorer_for
    from evalfarm.scorers.base import RunOptions

    cat = tmp_path / "cat.yaml"
    tasks = ["wordsim-ws353-all", "wordsim-ws353-rel"]  # the relatedness subset repeats the full set's words
    cat.write_text(
        f"include: [{REPO / 'catalog' / 'tasks.yaml'}]\ntasks: [{', '.join(tasks)}]\nmodels:\n"
        "  - {id: toy, level: word, kind: word-vectors, format: glove-text,\n"
        f"     source: {{type: path, ref: {toy_glove}}}}}\n"
    )
    run = Run(cat, tmp_path / "wh", RunRequest(executor="local"))
    run.begin()
    run.plan()  # the planned tasks (all of them: done units' texts are in the stores), the warehouse and run id
    loaded = run.cat
    words = {}
    for t in tasks:
        spec = loaded.task(t)
        words[t] = set(scorer_for(spec.kind).texts(scorer_for(spec.kind).load_for(spec, RunOptions())))
    union = len(set(words[tasks[0]]) | set(words[tasks[1]]))
    total = len(words[tasks[0]]) + len(words[tasks[1]])
    assert union < total  # the sets share words
    assert run._text_counts() == {t: round(len(words[t]) * union / total) for t in tasks}


def test_the_warehouse_counts_the_texts_each_store_holds(tmp_path) -> None:
    wh = Warehouse(tmp_path / "wh")
    for model, store, name, rows in (
        ("a", "k1", "p1.parquet", 3), ("a", "k1", "p2.parquet", 2), ("b", "k2", ".s.parquet", 5), ("c", "k3", None, 0),
        ("d", "k4", "bad.parquet", -1),
    ):  # fmt: skip
        d = tmp_path / "wh" / "embeddings" / f"model={model}" / f"store={store}"
        d.mkdir(parents=True, exist_ok=True)
        if rows >= 0 and name:
            pq.write_table(pa.table({"text": [f"t{i}" for i in range(rows)]}), d / name)
        elif name:
            (d / name).write_bytes(b"not parquet")
    assert wh.stored_texts() == {("a", "k1"): 5, ("d", "k4"): 0}  # a temp file is no vector; nor an empty folder
    assert wh.stored_texts({"a"}) == {("a", "k1"): 5}
    assert Warehouse(tmp_path / "none").stored_texts() == {}


def test_a_plans_stored_share_is_what_its_store_leaves_of_its_pending_texts() -> None:
    from evalfarm.plan import ModelPlan, Unit
    from evalfarm.runner import _stored_share

    def plan(*tasks: str) -> ModelPlan:
        return ModelPlan("m", "h", "sentence", "k", [Unit("m", t, "s", "sentence", "h", "c", "{}", t) for t in tasks])

    counts = {"x": 10, "y": 30, "done": 60}
    fresh = plan("x", "y")
    assert _stored_share(fresh, ["x", "y"], {}, counts) == 0.0
    assert _stored_share(fresh, ["x", "y"], {("m", "k"): 10}, counts) == pytest.approx(0.25)  # 30 of 40 left
    assert _stored_share(fresh, ["x", "y"], {("m", "k"): 90}, counts) == 1.0
    # a model whose "done" task is computed: its 60 texts are in the store, and 10 of the pending 40 besides
    assert _stored_share(fresh, ["x", "y", "done"], {("m", "k"): 70}, counts) == pytest.approx(0.25)
    assert _stored_share(fresh, ["x", "y", "done"], {("m", "k"): 40}, counts) == 0.0  # not even the done task's
    assert _stored_share(fresh, ["x", "y"], {("m", "k"): 5}, None) == 1.0  # nothing counted: stored means done


def test_a_counted_embedding_is_not_priced_twice() -> None:
    """The static cost holds the model's embedding; with the texts counted the built-in estimate adds their
    embedding, so only the unit's scoring cost stays (the starter zoo's first ETA was 25 % over a quiet run)."""
    unit = PlannedUnit("minilm", "sentence-transformers", "stsb", 5.5, embed_cost=10.0, score_cost=0.05)
    (got,) = eta.estimate([unit], History([]), texts={"stsb": 15_000})
    embed = 10.0 * 15_000 * eta.FALLBACK_EMBED_SECONDS_PER_TEXT + eta.BUILTIN_LOAD_SECONDS
    assert got.seconds == pytest.approx(0.05 * eta.DEFAULT_SECONDS_PER_COST + embed) and got.embed == pytest.approx(
        embed
    )
    (uncounted,) = eta.estimate([unit], History([]))  # no text count: the static cost, embedding and all
    assert uncounted.seconds == pytest.approx(5.5 * eta.DEFAULT_SECONDS_PER_COST + eta.BUILTIN_LOAD_SECONDS)
