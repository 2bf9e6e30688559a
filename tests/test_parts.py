"""The part book and the tail shared (evalfarm/parts.py, issue 50), in process: a real model's pass whose parts an
owner and a helper both embed (two threads, two contexts on one warehouse), against the same pass by one worker --
the same shards, byte for byte; the cost model; a lost helper's parts going back. The same on a local Ray with
declared GPUs: tests/test_placement.py."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from evalfarm.parts import PartBook, worth_sharing


def test_the_cost_model_sends_a_helper_only_when_the_parts_outlast_a_load():
    assert worth_sharing(unclaimed=9, part_seconds=4.0, load_seconds=2.0, workers=1)  # 36 s > 6 s
    assert not worth_sharing(unclaimed=2, part_seconds=1.0, load_seconds=5.0, workers=1)  # 2 s < 6 s
    assert not worth_sharing(unclaimed=9, part_seconds=4.0, load_seconds=2.0, workers=6)  # 6 s = 6 s: not more
    assert not worth_sharing(unclaimed=50, part_seconds=None, load_seconds=0.1, workers=1)  # no part finished yet


def test_a_lost_helpers_part_goes_back_and_a_lost_owner_closes_its_pass():
    book = PartBook()
    book.open("p", "m", ["a", "b", "c"], owner="w0", load_seconds=1.0)
    assert book.claim("p", "w0") == (0, "a") and book.join("p", "w1") and book.claim("p", "w1") == (1, "b")
    book.release("w1")  # the helper's worker died mid-part
    assert book.status("p")[:2] == (2, 1)
    assert book.claim("p", "w0") == (1, "b")  # the owner takes it back first
    book.done("p", 0, "w0", 2.0)
    (state,) = book.snapshot()
    assert (state.unclaimed, state.running, state.done, state.workers, state.part_seconds) == (1, 1, 1, 2, 2.0)
    book.release("w0")  # the owner died: its pass closes, helpers find nothing more
    assert book.claim("p", "w1") is None and book.snapshot() == []
    assert book.close("p") == {"w0": 1}


def test_a_part_stalled_past_its_time_is_taken_back():
    now = [0.0]
    book = PartBook(clock=lambda: now[0])
    book.open("p", "m", ["a", "b"], owner="w0", load_seconds=1.0)
    book.claim("p", "w0")
    book.join("p", "w1")
    book.claim("p", "w1")
    book.done("p", 0, "w0", 1.0)
    now[0] = 61.0  # past max(60 s, 5 parts of 1 s)
    assert book.claim("p", "w0") == (1, "b")
    book.done("p", 1, "w1", 70.0)  # the stalled helper finishes after all: counted once
    book.done("p", 1, "w0", 1.0)
    assert book.close("p") == {"w0": 1, "w1": 1}


class _Waiting(PartBook):
    """A book whose owner, after its first part, waits until the helper has claimed one: both embed, whatever the
    machine's speed."""

    def __init__(self) -> None:
        super().__init__()
        self.helper_claimed = threading.Event()
        self.owner_parts = 0

    def claim(self, pass_id, worker):
        if worker == "owner" and self.owner_parts >= 1:
            assert self.helper_claimed.wait(120), "the helper never claimed a part"
        got = super().claim(pass_id, worker)
        if got is not None and worker == "owner":
            self.owner_parts += 1
        if got is not None and worker == "helper":
            self.helper_claimed.set()
        return got


def _catalog(d: Path, data_dir: Path) -> Path:
    from tests.support.task_files import sentence_pool_entry

    (d / "cat.yaml").write_text(
        "tasks:\n" + sentence_pool_entry(d, data_dir, "pool", 60, 1100) + "models:\n  - {id: static, level: sentence,"
        " kind: static, source: {type: package, ref: tokenlearn-static-model, path: static_model/model}}\n"
    )
    return d / "cat.yaml"


def _store(wh_path: Path, plan) -> tuple[dict[str, bytes], list[str]]:
    from evalfarm.embed import TextStore
    from evalfarm.warehouse import Warehouse

    wh = Warehouse(wh_path)
    store = TextStore(wh, plan.model, plan.store)
    stored = store.load()
    return {t: stored.emb[i].tobytes() for t, i in stored.index.items()}, sorted(Path(p).name for p in store.shards())


def test_an_owner_and_a_helper_embed_one_pass_and_store_one_workers_shards(tmp_path, data_dir, monkeypatch):
    import json

    from evalfarm.catalog.registry import load_catalog
    from evalfarm.execute import ExecContext, embed_model, help_embed
    from evalfarm.outcomes import Status
    from evalfarm.plan import plan_run
    from evalfarm.warehouse import Warehouse
    from tests.support.task_files import data_folder

    monkeypatch.setenv("EVALFARM_EMBED_PART_TEXTS", "150")
    with data_folder(tmp_path):
        cat = load_catalog(_catalog(tmp_path, data_dir))
        (plan,) = plan_run(cat)
        book = _Waiting()
        shared, alone = tmp_path / "shared", tmp_path / "alone"
        out: dict[str, list] = {}

        def work(name: str, fn) -> None:
            ctx = ExecContext(catalog=cat, warehouse=Warehouse(shared).init(), run_id="r", parts=book, worker=name)
            out[name] = fn(ctx)

        owner = threading.Thread(target=work, args=("owner", lambda ctx: embed_model(plan, ctx)))
        owner.start()
        for _ in range(1200):  # the owner has opened its pass once it has loaded the model
            if book.snapshot():
                break
            threading.Event().wait(0.1)
        (state,) = book.snapshot()
        helper = threading.Thread(target=work, args=("helper", lambda ctx: help_embed(plan, state.pass_id, ctx)))
        helper.start()
        owner.join(300)
        helper.join(300)
        assert [o.status for o in out["owner"]] == [Status.EMBEDDED]
        (h,) = out["helper"]
        assert h.status == Status.SKIPPED and h.detail.startswith("tail helper: ") and "part(s)" in h.detail
        embed_model(plan, ExecContext(catalog=cat, warehouse=Warehouse(alone).init(), run_id="r"))
        prov = json.loads(Warehouse(shared).query("SELECT provenance FROM models").to_pylist()[0]["provenance"])
    by_worker = prov["tail_shared"]["by_worker"]
    assert set(by_worker) == {"owner", "helper"} and sum(by_worker.values()) == prov["tail_shared"]["parts"] > 5
    vectors_shared, shards_shared = _store(shared, plan)
    vectors_alone, shards_alone = _store(alone, plan)
    assert len(vectors_shared) > 1000 and vectors_shared == vectors_alone  # every vector, byte for byte
    assert shards_shared == shards_alone  # the same parts, the same shards


@pytest.mark.parametrize("raw", ["0", "-3", "many"])
def test_a_part_size_that_is_not_a_positive_count_is_refused(raw, monkeypatch):
    from evalfarm.execute import PART_TEXTS_ENV, part_texts

    monkeypatch.setenv(PART_TEXTS_ENV, raw)
    with pytest.raises(ValueError, match=PART_TEXTS_ENV):
        part_texts()
