"""EvalRank (Wang, Kuo & Li, ACL 2022, "Just Rank"): for each positive pair (x, y), the rank of y among all
background items by similarity to x.

Task kind ``evalrank``: a file of directed positive pairs (``pairs``) and background files; every item of the pool
is background (22,207 words; 24,957 sentences, as in the paper). Vectors are prepared under EvalRank's protocol for
the pool's level (:mod:`evalfarm.preprocess`), ranks are counted exactly by :mod:`evalfarm.scorers.rank_kernel`.

One pass stores, per pair, the optimistic rank (1 + the number of background items scoring strictly above the
positive) and the number of items tied with it; MR, MRR and Hits@k are reported under the three tie policies from
that one pass (PyKEEN's way; :mod:`evalfarm.ranking` defines them): ``optimistic`` (the paper's), ``pessimistic``
(rank + tied) and ``realistic`` (rank + tied / 2, the expected rank under random tie-breaking: what the boards show).
Variants: the similarity (``cos``, ``l2``: 1/(1+d)),
``no-center`` and ``filter-other-positives``; a binary model (postprocess ``binary``) adds ``hamming``: its bits ranked
by Hamming distance, exact integer distances whose ties the three policies make explicit (the ``cos`` variant is the
cosine of its dequantised +1 / -1 vectors under the protocol).

Prompts: the pool is one kind of text (task type ``similarity``), so an instruction-tuned model embeds every item
under one prompt; a model whose per-task prompts name a query and a document prompt for the task embeds the queries
under the first and the pool under the second (:func:`rank_pool`).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pyarrow as pa
from pydantic import Field

from evalfarm.catalog.specs import TaskSpec
from evalfarm.metrics import HITS_PATTERN, METRICS
from evalfarm.preprocess import Prepared, Protocol
from evalfarm.preprocess import prepare as prepare_protocol
from evalfarm.ranking import Ties, rank_metrics_by_ties, tie_ranks
from evalfarm.scorers import register
from evalfarm.scorers.base import (
    MetricRow,
    RunOptions,
    Scorer,
    ScoreResult,
    Similarity,
    TextVectors,
    ThinRule,
    packaged_sql,
)

if TYPE_CHECKING:  # imported where a pool is loaded
    from evalfarm.scorers.neighbours import Neighbours
    from evalfarm.taskdata.evalrank import RankPool

NEIGHBOURS = 10
"""Each query's top-k background items kept in the ``neighbours`` table (what a model confuses its queries with),
selected from the cos pass's own score blocks (``NEIGHBOURS_SIMILARITY``): the selection costs a fraction of a
pass, so doing it once, in one pass, keeps it a small share of a unit (benchmarks/README.md)."""
NEIGHBOURS_SIMILARITY = "cos"

DETAIL_SCHEMAS: dict[str, pa.Schema] = {
    # EvalRank per pair: the optimistic rank and the tied count, once; the views derive the other tie policies
    "ranks": pa.schema(
        [
            ("run_id", pa.string()),
            ("model", pa.string()),
            ("task", pa.string()),
            ("variant", pa.string()),
            ("query_id", pa.int64()),
            ("positive_id", pa.int64()),
            ("query", pa.string()),
            ("positive", pa.string()),
            ("rank", pa.int64()),
            ("tied", pa.int64()),
            ("score", pa.float32()),
            ("oov", pa.bool_()),
            ("fingerprint", pa.string()),
        ]
    ),
    # EvalRank: each query's top-k background items (what the model confuses it with), from the rank pass
    "neighbours": pa.schema(
        [
            ("run_id", pa.string()),
            ("model", pa.string()),
            ("task", pa.string()),
            ("variant", pa.string()),
            ("query_id", pa.int64()),
            ("query", pa.string()),
            ("position", pa.int64()),
            ("neighbour_id", pa.int64()),
            ("neighbour", pa.string()),
            ("score", pa.float32()),
            ("fingerprint", pa.string()),
        ]
    ),
}
"""EvalRank's per-unit detail tables; their views (``ranks``, ``neighbours``, ``hardest_pairs``, ...) are in
``evalrank.sql`` beside this module."""


class EvalRankTask(TaskSpec):
    """An EvalRank pool: ``pairs`` (``x<TAB>y`` per line, both directions listed) and one or more background files."""

    kind: Literal["evalrank"] = "evalrank"
    format: Literal["evalrank-word", "evalrank-sentence"]
    pairs_from: Literal["stsb", "str"] | None = Field(
        default=None,
        description="keep only the positive pairs found in this source (the paper's Table 7), matched on lowercased "
        "letters and digits; its files are the roles from.* (STS-B: from.train / from.dev / from.test; STR: "
        "from.data); the background is unchanged",
    )


@dataclass
class PairRanks:
    """One similarity's pass over a pool: per ranked pair, the optimistic rank and the tied count."""

    similarity: str
    pair_index: np.ndarray  # indices into the pool's pairs (skip drops some)
    rank: np.ndarray  # int64 optimistic ranks
    tied: np.ndarray  # int64 background items tied exactly with the positive
    score: np.ndarray  # float32 s(x, y)
    pair_oov: np.ndarray  # bool: x or y out of vocabulary
    n_background: int
    neighbours: Neighbours | None = None  # each query's top-k background items

    def ranks(self, ties: Ties) -> np.ndarray:
        """Float ranks under a tie policy, derived from the one pass."""
        return tie_ranks(self.rank, self.tied, ties)


def tie_policy_rows(rank: np.ndarray, tied: np.ndarray, hits: tuple[int, ...], variant: str) -> list[MetricRow]:
    """MR, MRR and Hits@k of one variant under each tie policy (:func:`evalfarm.ranking.rank_metrics_by_ties`), from
    the optimistic ranks and tied counts of one pass: what :meth:`EvalRankScorer.score` stores and
    :func:`metrics_from_ranks` recomputes."""
    return [
        MetricRow(metric, value, variant=variant, ties=ties)
        for ties, values in rank_metrics_by_ties(rank, tied, hits).items()
        for metric, value in values.items()
    ]


def metrics_from_ranks(rank: np.ndarray, tied: np.ndarray, hits: tuple[int, ...], variant: str) -> list[MetricRow]:
    """One variant's rank metrics under each tie policy, ``n_pairs`` and ``tie_rate``, from its stored per-pair ranks
    (the ``ranks`` table: the optimistic rank and the tied count), computed as :meth:`EvalRankScorer.score` computes
    them from its pass (:func:`tie_policy_rows`): what ``evalfarm verify --deep`` holds the stored numbers to."""
    n = len(rank)
    rows = tie_policy_rows(np.asarray(rank, np.int64), np.asarray(tied, np.int64), hits, variant)
    rows.append(MetricRow("n_pairs", float(n), variant=variant))
    rows.append(MetricRow("tie_rate", float((np.asarray(tied) > 0).mean()) if n else 0.0, variant=variant))
    return rows


def rank_pool(
    vectors: TextVectors,
    queries: np.ndarray,
    positives: np.ndarray,
    *,
    similarity: Similarity,
    center: bool = True,
    filter_other_positives: bool = False,
    device: str | None = None,
    neighbours: int = 0,
    items: list[str] | None = None,
    hamming: bool = False,
) -> PairRanks:
    """Prepare the stored vectors under EvalRank's protocol (centring, normalisation, the OOV vector and OOV policy
    of ``vectors.oov_policy``) and rank every pair against the background (all usable items); with
    ``neighbours=k`` also each query's top-k background items, from the same score blocks.

    An asymmetric model (``vectors.query``: the queries under its query prompt; ``items``: the pool's texts) ranks
    each query's own vector, prepared the same way over the query side, against the background under the document
    prompt; the query's own item stays out of its background, as in the symmetric pass.

    ``hamming``: binary vectors ranked by the Hamming distance of their bits (:func:`sign_bits`), no protocol."""
    from evalfarm.scorers.rank_kernel import rank_counts

    protocol = Protocol.for_level(vectors.level, center=center, oov=vectors.oov_policy)

    def prepare(emb: np.ndarray, oov: np.ndarray) -> Prepared:
        if hamming:
            return sign_bits(emb, oov, protocol)
        return prepare_protocol(emb, oov, protocol, similarity=similarity, vocab=vectors.vocab)

    prep = prepare(vectors.emb, vectors.oov)
    x, q_ids, q_usable, q_oov, exclude = prep.vectors, queries, prep.usable[queries], vectors.oov[queries], None
    if vectors.query is not None and items is not None:  # the queries under the query prompt, centred on their own
        x, q_ids, q_usable, q_oov = _query_side(prep, vectors.query, prepare, [items[int(q)] for q in queries])
        exclude, neighbours = queries, 0  # the query's own item (a document row) never counts; no neighbour lists
    pair_oov = q_oov | vectors.oov[positives]
    pair_index = np.flatnonzero(q_usable & prep.usable[positives])
    background = np.flatnonzero(prep.usable)
    counts = rank_counts(
        x,
        q_ids[pair_index],
        positives[pair_index],
        background,
        similarity,
        filter_other_positives=filter_other_positives,
        device=device,
        neighbours=neighbours,
        exclude=exclude[pair_index] if exclude is not None else None,
    )
    return PairRanks(
        similarity="hamming" if hamming else similarity,
        pair_index=pair_index,
        rank=1 + counts.above,
        tied=counts.tied,
        score=counts.score / x.shape[1] if hamming else counts.score,
        pair_oov=pair_oov[pair_index],
        n_background=len(background),
        neighbours=counts.neighbours,
    )


def _query_side(
    prep: Prepared, side: Any, prepare: Any, query_texts: list[str]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The rank kernel's layout for an asymmetric pool: the document rows, then the query side's (prepared on its
    own); each pair's query id in the second block, its usability and OOV flag."""
    q_prep = prepare(side.emb, side.oov)
    rows = side.rows(query_texts)
    x = np.concatenate([prep.vectors, q_prep.vectors])
    return x, len(prep.vectors) + rows, q_prep.usable[rows], side.oov[rows]


def sign_bits(emb: np.ndarray, oov: np.ndarray, protocol: Protocol) -> Prepared:
    """Binary vectors for Hamming ranks: each coordinate's bit (``x > 0``, sentence-transformers' binary precision)
    as +1 / -1, unnormalised, so a dot product is ``d - 2 * hamming`` exactly in float32 (integers up to 2**24): the
    cosine pass then ranks by Hamming distance, and every exact tie of distances is a tie of scores (the tie
    policies count them). No centring: bits have no mean to remove. An OOV row is the zero vector (dot product 0:
    distance d / 2 from everything), left out under the ``skip`` policy."""
    oov = np.asarray(oov, dtype=bool)
    x = np.where(np.asarray(emb) > 0, np.float32(1.0), np.float32(-1.0)).astype(np.float32)
    x[oov] = 0.0
    usable = ~oov if protocol.oov == "skip" else np.ones(len(x), dtype=bool)
    return Prepared(vectors=x, usable=usable, oov=oov)


def variant_name(similarity: str, *, center: bool, filter_other_positives: bool) -> str:
    parts = [similarity]
    if not center:
        parts.append("no-center")
    if filter_other_positives:
        parts.append("filter-other-positives")
    return "/".join(parts)


@register
class EvalRankScorer(Scorer[EvalRankTask, "RankPool"]):
    name = "evalrank"
    version = "1"
    task_spec = EvalRankTask
    primary_metric = "mrr"
    declared_metrics = MappingProxyType({f"hits@{k}": METRICS[HITS_PATTERN].carried() for k in (1, 3)})
    """Hits@1 and Hits@3 beside MRR in the correlation views: the paper's layout shows them."""
    query_side = True  # symmetric (a pool of like texts) unless a model's per-task prompts name the two sides
    thin_rules = (
        ThinRule("n_pairs", at_least=5),
        ThinRule("oov_pair_rate", at_most=0.8),
        ThinRule("tie_rate", at_most=0.99),
    )
    """Too thin under 5 pairs, when over 80 % of the pairs have an OOV query or positive (a GloVe cut to 12 % of the
    pool: 0.92, its l2 / optimistic MRR far above the whole model's, from OOV ties), or when nearly every positive
    ties with a background item (its rank is the tie policy's, not the model's). The starter zoo: at least 5514
    pairs, OOV pair rate at most 0.026; tie rate at most 0.074 except spaCy md (0.965: its 20k vectors are shared by
    500k keys), the one thin margin, so the tie bound flags only near-total ties. The OOV bound is loose: the
    5000-word toy GloVe of the tests has an OOV pair rate of 0.75 (and an l2 / optimistic MRR of 0.38 against full
    GloVe's 0.08, the same artefact)."""
    description = "rank of y among all background items by similarity to x; MR, MRR, Hits@k under three tie policies"
    detail_schemas = DETAIL_SCHEMAS
    views = packaged_sql(__package__ or "evalfarm.scorers", "evalrank.sql")

    def params(self, task: EvalRankTask, options: RunOptions) -> dict[str, Any]:
        return {
            "similarities": list(options.similarities),
            "center": options.center,
            "filter_other_positives": options.filter_other_positives,
            "hits": list(options.hits),
            # the OOV policy is the model's own (``oov:`` in its spec, so already in the unit's spec hash)
            "protocol": {**Protocol.for_level(task.level, center=options.center).key(), "oov": "model spec"},
            "keep_details": options.keep_details,
            "neighbours": NEIGHBOURS if options.keep_details else 0,
            "neighbours_for": NEIGHBOURS_SIMILARITY
            if NEIGHBOURS_SIMILARITY in options.similarities
            else options.similarities[0],
        }

    def query_texts(self, data: RankPool) -> list[str]:
        """The items that are some pair's query (asked for by a model whose per-task prompts name two sides)."""
        return [data.items[int(q)] for q in np.unique(data.queries)]

    def load(self, task: EvalRankTask) -> RankPool:
        from evalfarm.taskdata.evalrank import load_evalrank_pool

        return load_evalrank_pool(task)

    def score(
        self,
        task: EvalRankTask,
        data: RankPool,
        vectors: TextVectors,
        params: dict[str, Any],
        *,
        device: str | None = None,
    ) -> ScoreResult:
        hits = tuple(params["hits"])
        out = ScoreResult()
        details = []
        n_items = len(data.items)
        passes = [(sim, False) for sim in params["similarities"]]
        if vectors.binary:  # a binary model's bits, ranked by Hamming distance, beside its dequantised vectors
            passes.append(("cos", True))
        for sim, hamming in passes:
            res = rank_pool(
                vectors,
                data.queries,
                data.positives,
                similarity=sim,
                center=params["center"],
                filter_other_positives=params["filter_other_positives"],
                device=device,
                neighbours=int(params.get("neighbours", 0))
                if sim == params.get("neighbours_for", sim) and not hamming
                else 0,
                items=data.items,
                hamming=hamming,
            )
            variant = variant_name(
                "hamming" if hamming else sim,
                center=params["center"] or hamming,
                filter_other_positives=params["filter_other_positives"],
            )
            out.rows += tie_policy_rows(res.rank, res.tied, hits, variant)
            n_pairs = len(res.pair_index)
            for metric, value in {
                "n_pairs": float(n_pairs),
                "oov_rate": float(vectors.oov.mean()) if n_items else 0.0,
                "oov_pair_rate": float((vectors.oov[data.queries] | vectors.oov[data.positives]).mean()),
                "n_background": float(res.n_background),
                # pairs whose positive ties exactly with some background item: their rank depends on the policy
                "tie_rate": float((res.tied > 0).mean()) if n_pairs else 0.0,
            }.items():
                out.rows.append(MetricRow(metric, value, variant=variant))
            if params.get("keep_details", True):
                details.append((variant, res))
        if details:
            out.details["ranks"] = _ranks_table(data, details)
            if any(res.neighbours is not None for _, res in details):
                out.details["neighbours"] = _neighbours_table(data, details)
        return out


def _items_array(data: Any) -> pa.Array:  # Any: the array is cached on the pool as an attribute of its own
    """The pool's items as one Arrow string array (built once per task): texts are taken from it by id in C++,
    never through Python lists, which are far slower for tens of thousands of neighbour texts."""
    import pyarrow as pa

    arr = getattr(data, "_items_array", None)
    if arr is None:
        arr = pa.array(data.items, pa.string())
        data._items_array = arr
    return arr


def _ranks_table(data: RankPool, details: list[tuple[str, PairRanks]]) -> pa.Table:
    import pyarrow as pa

    items = _items_array(data)
    parts = []
    for variant, res in details:
        q = data.queries[res.pair_index]
        p = data.positives[res.pair_index]
        parts.append(
            pa.table(
                {
                    "variant": pa.array([variant] * len(q), pa.string()),
                    "query_id": pa.array(q, pa.int64()),
                    "positive_id": pa.array(p, pa.int64()),
                    "query": items.take(pa.array(q)),
                    "positive": items.take(pa.array(p)),
                    "rank": pa.array(res.rank, pa.int64()),
                    "tied": pa.array(res.tied, pa.int64()),
                    "score": pa.array(res.score, pa.float32()),
                    "oov": pa.array(res.pair_oov, pa.bool_()),
                }
            )
        )
    return pa.concat_tables(parts)


def _neighbours_table(data: RankPool, details: list[tuple[str, PairRanks]]) -> pa.Table:
    import pyarrow as pa

    items = _items_array(data)
    parts = []
    for variant, res in details:
        nb = res.neighbours
        if nb is None:
            continue
        k = nb.ids.shape[1]
        q = np.repeat(nb.queries, k)
        pos = np.tile(np.arange(1, k + 1), len(nb.queries))
        ids = nb.ids.reshape(-1)
        keep = ids >= 0  # padding where the background has fewer than k items
        q, pos, ids, sc = q[keep], pos[keep], ids[keep], nb.scores.reshape(-1)[keep]
        parts.append(
            pa.table(
                {
                    "variant": pa.array([variant] * len(q), pa.string()),
                    "query_id": pa.array(q, pa.int64()),
                    "query": items.take(pa.array(q)),
                    "position": pa.array(pos, pa.int64()),
                    "neighbour_id": pa.array(ids, pa.int64()),
                    "neighbour": items.take(pa.array(ids)),
                    "score": pa.array(sc, pa.float32()),
                }
            )
        )
    return pa.concat_tables(parts)
