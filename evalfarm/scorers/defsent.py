"""Definition -> word retrieval, DefSent-style (Tsukagoshi, Sasano & Takeda 2021, "DefSent: Sentence Embeddings
using Definition Sentences"): does a model put a definition near the word it defines?

Task kind ``defsent`` (sentences: a definition and a word are both embedded as texts by the same model; a
bag-of-words model covers the word-vector zoo). The data (``evalfarm data build defsent``: the recipe in
:mod:`evalfarm.taskdata.build_defsent`) is WordNet 3.0 first-sense glosses of a seeded sample of EvalRank pool
words, one word per gloss. For each (definition d, word w) the rank of w among all the set's candidate words by the
cosine of raw embeddings, counted exactly by the EvalRank kernel (:mod:`evalfarm.scorers.rank_kernel`)::

    above = #{w' != w: cos(d, w') > cos(d, w)}     tied = #{w' != w: cos(d, w') == cos(d, w)}

with EvalRank's tie policies (:mod:`evalfarm.ranking`): optimistic rank 1 + above, pessimistic 1 + above + tied,
realistic 1 + above + tied / 2. MRR and Hits@1/3/10 (DefSent's word-prediction metrics) and MR per policy;
``tie_rate`` (share of definitions whose word ties with another candidate) and ``oov_rate`` (texts the model cannot
embed: a zero vector, cosine 0 with everything, so it ties) say how much the policy matters. Primary: MRR under the
boards' policy, realistic (the expected rank under random tie-breaking: a model that maps every text to one vector
scores chance, not 1).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from evalfarm.catalog.specs import TaskSpec
from evalfarm.preprocess import Protocol, prepare
from evalfarm.ranking import BOARD_TIES, DEFAULT_HITS, rank_metrics_by_ties
from evalfarm.scorers import register
from evalfarm.scorers.base import MetricRow, RunOptions, Scorer, ScoreResult, TextVectors, ThinRule
from evalfarm.taskdata.build import BuildRef

HITS = DEFAULT_HITS  # fingerprinted (``params``): DefSent's own choice, the same k as EvalRank's default


class DefSentTask(TaskSpec):
    """Definition -> word pairs built by ``evalfarm data build defsent`` (``build``; ``files``: its inputs)."""

    kind: Literal["defsent"] = "defsent"
    level: Literal["sentence"] = "sentence"
    build: BuildRef


@dataclass
class DefSentData:
    """(definition, word) pairs; ``texts`` lists each distinct text once (words first)."""

    words: list[str]
    definitions: list[str]
    texts: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if len(self.words) != len(self.definitions):
            raise ValueError("one definition per word")
        if not self.texts:
            self.texts = list(dict.fromkeys([*self.words, *self.definitions]))


def read_built(path: Any) -> DefSentData:
    from evalfarm.taskdata.build import read_rows
    from evalfarm.taskdata.build_defsent import DEFSENT_COLUMNS

    at = {c: i for i, c in enumerate(DEFSENT_COLUMNS)}
    rows = read_rows(path)
    return DefSentData([r[at["word"]] for r in rows], [r[at["definition"]] for r in rows])


def definition_ranks(x: np.ndarray, queries: np.ndarray, words: np.ndarray, *, device: str | None = None) -> Any:
    """The kernel's counts: each definition (``queries``) against every word, its own word the positive."""
    from evalfarm.scorers.rank_kernel import rank_counts

    background = np.unique(words)
    return rank_counts(x, queries, words, background, "cos", device=device)


@register
class DefSentScorer(Scorer[DefSentTask, DefSentData]):
    name = "defsent"
    version = "1"
    task_spec = DefSentTask
    primary_metric = "mrr"
    role = "diagnostic"
    prompt_type = "retrieval"  # a definition (query) asks for the word it defines (document)
    query_side = True
    asymmetric = True
    description = "definition -> word retrieval over WordNet glosses: MRR, Hits@1/3/10 under three tie policies"
    thin_rules = (ThinRule("n_pairs", at_least=5), ThinRule("tie_rate", at_most=0.99))
    """Too thin under 5 definitions (the generated set: 3,000), or when nearly every word ties with another candidate
    (its rank is the tie policy's, not the model's; EvalRank's bound). The 5,000-word toy GloVe as a bag of words:
    OOV rate 0.39, tie rate 0.77."""
    views = """
-- defsent: definition -> word retrieval per model, task and tie policy: MRR, Hits@1/3/10 and MR of each
-- definition's word among all candidate words.
CREATE OR REPLACE VIEW defsent AS
SELECT model, task, ties,
       max(value) FILTER (WHERE metric = 'mrr') AS mrr,
       max(value) FILTER (WHERE metric = 'hits@1') AS hits_1,
       max(value) FILTER (WHERE metric = 'hits@3') AS hits_3,
       max(value) FILTER (WHERE metric = 'hits@10') AS hits_10,
       max(value) FILTER (WHERE metric = 'mr') AS mr
FROM metrics WHERE scorer = 'defsent' AND ties IS NOT NULL
GROUP BY model, task, ties;
"""

    def params(self, task: DefSentTask, options: RunOptions) -> dict[str, Any]:
        return {"similarity": "cos", "protocol": Protocol("raw").key(), "hits": list(HITS)}

    def is_primary(self, row: MetricRow, task: DefSentTask | None, data: DefSentData) -> bool:
        """MRR under the boards' tie policy only (module docstring)."""
        return super().is_primary(row, task, data) and row.ties == BOARD_TIES

    def query_texts(self, data: DefSentData) -> list[str]:
        """The definitions: each asks for the word it defines (the words are the documents)."""
        return list(dict.fromkeys(data.definitions))

    def load(self, task: DefSentTask) -> DefSentData:
        from evalfarm.taskdata.build import built_file
        from evalfarm.taskdata.data import task_file

        inputs = {role: task_file(task, role) for role in sorted(task.files)}
        return read_built(built_file(task.build, inputs=inputs))

    def score(
        self,
        task: DefSentTask,
        data: DefSentData,
        vectors: TextVectors,
        params: dict[str, Any],
        *,
        device: str | None = None,
    ) -> ScoreResult:
        out = ScoreResult()
        hits = tuple(params.get("hits", HITS))
        x = prepare(vectors.emb, vectors.oov, Protocol("raw"), similarity="cos").vectors
        index = {t: i for i, t in enumerate(data.texts)}
        words = np.array([index[w] for w in data.words], dtype=np.int64)
        if vectors.query is None:
            queries = np.array([index[d] for d in data.definitions], dtype=np.int64)
        else:  # the definitions under the model's query prompt: rows after the task's texts
            side = vectors.query
            q = prepare(side.emb, side.oov, Protocol("raw"), similarity="cos").vectors
            queries = len(x) + side.rows(data.definitions)
            x = np.concatenate([x, q])
        counts = definition_ranks(x, queries, words, device=device)
        for ties, values in rank_metrics_by_ties(1 + counts.above, counts.tied, hits).items():
            out.rows += [MetricRow(metric, value, variant="cos", ties=ties) for metric, value in values.items()]
        n = len(queries)
        out.rows += [
            MetricRow("n_pairs", float(n), variant="cos"),
            MetricRow("n_candidates", float(len(np.unique(words))), variant="cos"),
            MetricRow("tie_rate", float((counts.tied > 0).mean()) if n else 0.0, variant="cos"),
            MetricRow("oov_rate", float(vectors.oov.mean()) if len(vectors.oov) else 0.0, variant="cos"),
        ]
        return out
