"""Task readers on the real files (counts from each folder's SOURCE.md) and on small synthetic files that
carry each encoding case the real files have (Latin-1 bytes, a BOM, CRLF, no final newline) and malformed
lines, whose errors must name file:line. No real data is copied: synthetic files are written to tmp dirs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from evalfarm.taskdata.data import TaskDataError
from evalfarm.taskdata.downstream import (
    DownstreamTask,
    LabelledSet,
    load_downstream_task,
    load_downstream_tasks,
    read_mrpc_file,
    read_scicite_file,
    read_sick_e_file,
    read_sst_file,
    read_trec_file,
    stratified_subsample,
)
from evalfarm.taskdata.sts import (
    STS_FOLDERS,
    load_sick_r,
    load_str,
    load_sts_year,
    load_stsb,
    read_sick_file,
    read_sts_subset,
    read_stsb_file,
)
from evalfarm.taskdata.textfiles import read_lines
from evalfarm.taskdata.wordsim import WORDSIM_FILES, load_wordsim_sets, read_wordsim


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


# --- word similarity -------------------------------------------------------------------------------------

WORDSIM_COUNTS = {
    "WS-353-ALL": 353, "WS-353-SIM": 203, "WS-353-REL": 252, "MC-30": 30, "RG-65": 65, "RW-STANFORD": 2034,
    "MEN-TR-3k": 3000, "MTurk-287": 287, "MTurk-771": 771, "YP-130": 130, "SimLex-999": 999, "VERB-143": 144,
    "SimVerb-3500": 3500,
}  # fmt: skip


def test_wordsim_real_sets_counts_and_vocabulary(data_dir):
    sets = load_wordsim_sets(data_dir / "wordsim")
    assert {n: len(s) for n, s in sets.items()} == WORDSIM_COUNTS
    assert list(sets) == list(WORDSIM_FILES)
    for s in sets.values():
        assert s.gold.dtype == np.float64 and np.isfinite(s.gold).all()
        assert all(w == w.lower() for w in s.word1 + s.word2)
    # WS-353 has capitalised words in the file; the toolkit lower-cases them
    assert "maradona" in sets["WS-353-ALL"].vocabulary()
    # the union of the 13 sets is exactly EvalRank's basic vocabulary (SOURCE.md)
    union = set().union(*(s.vocabulary() for s in sets.values()))
    basic = set(read_lines(data_dir / "evalrank" / "word_evalrank" / "basic_vocab.txt"))
    assert union == basic and len(union) == 5846
    # first pair of WS-353-ALL, a CRLF file: no '\r' survives in the last field
    ws = sets["WS-353-ALL"]
    assert (ws.word1[0], ws.word2[0], ws.gold[0]) == ("love", "sex", 6.77)


def test_wordsim_crlf_spaces_and_missing_final_newline(tmp_path):
    f = write(tmp_path / "EN-TOY-3.txt", b"Tiger\tCat\t7.35\r\nbook  paper 5.25\r\n\r\nA b 0\r\nc d 1e1")
    s = read_wordsim(f)
    assert s.name == "TOY-3"
    assert s.word1 == ["tiger", "book", "a", "c"] and s.word2 == ["cat", "paper", "b", "d"]
    assert s.gold.tolist() == [7.35, 5.25, 0.0, 10.0]
    assert s.n_blank_lines == 1


@pytest.mark.parametrize(
    ("content", "where", "what"),
    [
        (b"a b 1\nc d\n", ":2:", "3 fields"),
        (b"a b 1\nc d e 2\n", ":2:", "3 fields"),
        (b"a b 1\r\nc d x\r\n", ":2:", "must be a number"),
        (b"a b nan\n", ":1:", "finite"),
        (b"a b 1\nc\xe9 d 2\n", ":2:", "not valid utf-8"),
    ],
)
def test_wordsim_malformed_lines_name_file_and_line(tmp_path, content, where, what):
    f = write(tmp_path / "EN-BAD.txt", content)
    with pytest.raises(TaskDataError, match=rf"EN-BAD\.txt{where}.*{what}"):
        read_wordsim(f)


def test_wordsim_unknown_set_name(data_dir):
    with pytest.raises(TaskDataError, match="unknown word-similarity set"):
        load_wordsim_sets(data_dir / "wordsim", ["WS-999"])


# --- STS -------------------------------------------------------------------------------------------------

STS_COUNTS = {
    "STS12": {"MSRpar": 750, "MSRvid": 750, "SMTeuroparl": 459, "surprise.OnWN": 750, "surprise.SMTnews": 399},
    "STS13": {"FNWN": 189, "headlines": 750, "OnWN": 561},
    "STS14": {"deft-forum": 450, "deft-news": 300, "headlines": 750, "images": 750, "OnWN": 750, "tweet-news": 750},
    "STS15": {"answers-forums": 375, "answers-students": 750, "belief": 375, "headlines": 750, "images": 750},
    "STS16": {"answer-answer": 254, "headlines": 249, "plagiarism": 230, "postediting": 244, "question-question": 209},
}
STS_LINES = {"STS12": 3108, "STS13": 1500, "STS14": 3750, "STS15": 8500, "STS16": 9183}


@pytest.mark.parametrize("year", list(STS_COUNTS))
def test_sts_years_real_counts(data_dir, year):
    task = load_sts_year(data_dir / "sts" / STS_FOLDERS[year])
    assert task.name == year
    assert {n: len(s) for n, s in task.subsets.items()} == STS_COUNTS[year]  # SentEval's subsets, its order
    # every line is either scored or counted as unscored
    assert task.n_pairs + sum(s.n_unscored for s in task.subsets.values()) == STS_LINES[year]
    for s in task.subsets.values():
        assert s.gold.dtype == np.float64 and 0 <= s.gold.min() and s.gold.max() <= 5
    pooled = task.pooled()
    assert len(pooled) == task.n_pairs and pooled.sent1[0] == next(iter(task.subsets.values())).sent1[0]


def test_sts12_gold_matches_all_file(data_dir):
    """STS.gs.ALL.txt is the five subsets' scores concatenated: the pooled gold must equal it exactly."""
    folder = data_dir / "sts" / "STS12-en-test"
    pooled = load_sts_year(folder).pooled()
    all_scores = np.array([float(x) for x in read_lines(folder / "STS.gs.ALL.txt")])
    np.testing.assert_array_equal(pooled.gold, all_scores)


def test_stsb_both_copies_same_pairs(data_dir):
    proc = load_stsb(data_dir / "sts" / "STSBenchmark")
    raw = load_stsb(data_dir / "sts" / "STSBenchmark-raw")  # 9-column rows, CRLF train file
    for split, n in {"train": 5749, "dev": 1500, "test": 1379}.items():
        assert len(proc.subsets[split]) == len(raw.subsets[split]) == n
        np.testing.assert_array_equal(proc.subsets[split].gold, raw.subsets[split].gold)
        assert not any("\r" in s for s in raw.subsets[split].sent2)
    assert proc.subsets["train"].sent1[0] == "a plane is taking off ."
    assert raw.subsets["train"].sent1[0] == "A plane is taking off."


def test_sick_r_and_str_real_counts(data_dir):
    assert b"\r\n" in (data_dir / "sts" / "SICK" / "SICK_test_annotated.txt").read_bytes()[:400]
    sick = load_sick_r(data_dir / "sts" / "SICK")
    assert {n: len(s) for n, s in sick.subsets.items()} == {"train": 4500, "dev": 500, "test": 4927}
    assert 1 <= sick.subsets["test"].gold.min() and sick.subsets["test"].gold.max() <= 5
    strt = load_str(data_dir / "sts" / "STR")
    s = strt.subsets["test"]
    assert len(s) == 5500 and 0 <= s.gold.min() and s.gold.max() <= 1
    assert not any("\n" in x for x in s.sent1 + s.sent2)


def test_sts_subset_skips_unscored_and_handles_crlf_and_bom(tmp_path):
    inp = write(tmp_path / "STS.input.toy.txt", b"\xef\xbb\xbfA  cat .\tA dog .\r\nx\ty\r\nb c\td e\r\n")
    gs = write(tmp_path / "STS.gs.toy.txt", b"4.2\r\n\r\n0\r\n")
    s = read_sts_subset(inp, gs, "toy")
    assert s.sent1 == ["A cat .", "b c"] and s.sent2 == ["A dog .", "d e"]  # BOM gone, spaces normalised
    assert s.gold.tolist() == [4.2, 0.0] and s.n_unscored == 1


@pytest.mark.parametrize(
    ("inp", "gs", "where", "what"),
    [
        (b"a\tb\nc d\n", b"1\n2\n", "STS.input.t.txt:2:", "sent1<TAB>sent2"),
        (b"a\tb\nc\td\n", b"1\nfive\n", "STS.gs.t.txt:2:", "must be a number"),
        (b"a\tb\n", b"6\n", "STS.gs.t.txt:1:", r"must lie in \[0.0, 5.0\]"),
        (b"a\tb\nc\xe9\td\n", b"1\n2\n", "STS.input.t.txt:2:", "not valid utf-8"),
        (b"a\tb\nc\td\n", b"1\n", "has 2 lines but", "line by line"),
    ],
)
def test_sts_subset_errors_name_file_and_line(tmp_path, inp, gs, where, what):
    i = write(tmp_path / "STS.input.t.txt", inp)
    g = write(tmp_path / "STS.gs.t.txt", gs)
    with pytest.raises(TaskDataError, match=rf"{where}.*{what}"):
        read_sts_subset(i, g, "t")


def test_stsb_file_seven_or_nine_columns_crlf_quotes(tmp_path):
    rows = [
        b'main-news\tMSRpar\t2012\t0001\t3.5\tHe said "yes" .\tShe said "no" .',
        b"main-forums\tdeft-forum\t2014\t0002\t1.0\tA\tB\tlicence-a\tlicence-b",
    ]
    f = write(tmp_path / "sts-x.csv", b"\r\n".join(rows) + b"\r\n")
    s = read_stsb_file(f, "x")
    assert s.sent1 == ['He said "yes" .', "A"] and s.sent2 == ['She said "no" .', "B"]
    assert s.gold.tolist() == [3.5, 1.0]
    bad = write(tmp_path / "sts-bad.csv", rows[0] + b"\n" + b"a\tb\tc\t4\t2\tonly one sentence\n")
    with pytest.raises(TaskDataError, match=r"sts-bad\.csv:2:.*found 6"):
        read_stsb_file(bad, "bad")


SICK_HEAD = b"pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment"


def test_sick_file_crlf_and_errors(tmp_path):
    f = write(tmp_path / "SICK_t.txt", SICK_HEAD + b"\r\n1\tA man runs\tA person runs\t4.5\tENTAILMENT\r\n")
    rows = read_sick_file(f)
    assert rows.sent1 == ["A man runs"] and rows.relatedness.tolist() == [4.5]
    assert rows.entailment == ["ENTAILMENT"]  # no '\r' left on the last column
    no_head = write(tmp_path / "SICK_h.txt", b"1\tA\tB\t4.5\tENTAILMENT\n")
    with pytest.raises(TaskDataError, match=r"SICK_h\.txt:1:.*header"):
        read_sick_file(no_head)
    bad_score = write(tmp_path / "SICK_s.txt", SICK_HEAD + b"\n1\tA\tB\t4.5\tNEUTRAL\n2\tA\tB\t9\tNEUTRAL\n")
    with pytest.raises(TaskDataError, match=r"SICK_s\.txt:3:.*\[1.0, 5.0\]"):
        read_sick_file(bad_score)
    bad_label = write(tmp_path / "SICK_e.txt", SICK_HEAD + b"\n1\tA\tB\t4.5\tNEUTRAL\n2\tA\tB\t3\tMAYBE\n")
    with pytest.raises(TaskDataError, match=r"SICK_e\.txt:3:.*MAYBE"):
        read_sick_e_file(bad_label)


def test_str_csv_with_embedded_newlines_and_errors(tmp_path):
    head = b"Index,SourceID,SubsetID,PairID,Text,Score\n"
    good = head + b'0,STS,STS,STS_1,"A dog, running.\nA dog runs.",0.75\n1,SNLI,SNLI,S_2,"x\ny",0\n'
    s = load_str(write(tmp_path / "str.csv", good)).subsets["test"]
    assert s.sent1 == ["A dog, running.", "x"] and s.sent2 == ["A dog runs.", "y"] and s.gold.tolist() == [0.75, 0]
    three = head + b'0,STS,STS,STS_1,"a\nb",1\n1,STS,STS,STS_2,"a\nb\nc",1\n'
    with pytest.raises(TaskDataError, match=r"str3\.csv:6:.*two sentences"):
        load_str(write(tmp_path / "str3.csv", three))
    with pytest.raises(TaskDataError, match=r"strh\.csv:1:.*header"):
        load_str(write(tmp_path / "strh.csv", b"a,b\n1,2\n"))


# --- downstream ------------------------------------------------------------------------------------------

DOWNSTREAM_COUNTS = {
    "MR": {"cv": 10662}, "CR": {"cv": 3771}, "SUBJ": {"cv": 10000}, "MPQA": {"cv": 10603},
    "SST2": {"train": 67349, "dev": 872, "test": 1821}, "SST5": {"train": 8544, "dev": 1101, "test": 2210},
    "TREC": {"train": 5452, "test": 500}, "MRPC": {"train": 4076, "test": 1725},
    "SICK-E": {"train": 4500, "dev": 500, "test": 4927}, "SciCite": {"train": 7320, "dev": 916, "test": 1861},
}  # fmt: skip
PROTOCOLS = {"MR": "cv", "CR": "cv", "SUBJ": "cv", "MPQA": "cv", "TREC": "train_test", "MRPC": "train_test"}


@pytest.fixture(scope="module")
def downstream(data_dir) -> dict[str, DownstreamTask]:
    return load_downstream_tasks(data_dir / "downstream")


@pytest.mark.parametrize("name", list(DOWNSTREAM_COUNTS))
def test_downstream_real_counts_and_protocols(downstream, name):
    task = downstream[name]
    assert {role: len(part) for role, part in task.parts().items()} == DOWNSTREAM_COUNTS[name]
    assert task.protocol == PROTOCOLS.get(name, "train_dev_test")
    assert task.is_pair == (name in ("MRPC", "SICK-E"))
    for part in task.parts().values():
        assert part.labels.dtype == np.int64
        assert set(np.unique(part.labels).tolist()) == set(range(task.n_classes))
        assert all(part.text1) and (part.text2 is None or all(part.text2))


def test_downstream_label_counts_and_blank_lines(downstream):
    assert np.bincount(downstream["MR"].cv.labels).tolist() == [5331, 5331]
    assert (np.bincount(downstream["CR"].cv.labels).tolist(), downstream["CR"].n_blank_lines) == ([1366, 2405], 4)
    assert (np.bincount(downstream["MPQA"].cv.labels).tolist(), downstream["MPQA"].n_blank_lines) == ([7292, 3311], 3)
    assert np.bincount(downstream["SciCite"].splits["train"].labels).tolist() == [4297, 2038, 985]
    assert downstream["TREC"].label_names == ("ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM")
    assert downstream["SICK-E"].label_names == ("CONTRADICTION", "NEUTRAL", "ENTAILMENT")
    assert downstream["SUBJ"].label_names[1] == "objective"  # SentEval passes subj.objective as its "pos"
    assert downstream["MRPC"].f1_label == 1 and downstream["SST2"].f1_label is None


def test_real_trec_is_latin1_and_mrpc_has_a_bom(data_dir, downstream):
    raw = (data_dir / "downstream" / "TREC" / "train_5500.label").read_bytes()
    with pytest.raises(UnicodeDecodeError):
        raw.decode("utf-8")
    q = downstream["TREC"].splits["train"].text1[65]  # line 66 holds the 0xF0 byte
    assert q == "Which city has the oldest relationship as a sister\u00f0city with Los Angeles ?"
    for f in ("msr_paraphrase_train.txt", "msr_paraphrase_test.txt"):
        assert (data_dir / "downstream" / "MRPC" / f).read_bytes().startswith(b"\xef\xbb\xbf")
    first = downstream["MRPC"].splits["train"]
    assert first.labels[0] == 1 and first.text1[0].startswith("Amrozi accused his brother")


def test_trec_synthetic_latin1_and_errors(tmp_path):
    f = write(tmp_path / "t.label", b"LOC:city Which sister\xf0city ?\nNUM:date  When  ?\n")
    s = read_trec_file(f)
    assert s.text1 == ["Which sister\u00f0city ?", "When ?"] and s.labels.tolist() == [4, 5]
    with pytest.raises(TaskDataError, match=r"b\.label:2:.*unknown coarse class 'XYZ'"):
        read_trec_file(write(tmp_path / "b.label", b"LOC:city Where ?\nXYZ:foo What ?\n"))
    with pytest.raises(TaskDataError, match=r"c\.label:1:.*COARSE:fine"):
        read_trec_file(write(tmp_path / "c.label", b"LOC Where ?\n"))


MRPC_HEAD = b"Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"


@pytest.mark.parametrize("bom", [b"\xef\xbb\xbf", b""])
def test_mrpc_synthetic_with_and_without_bom(tmp_path, bom):
    f = write(tmp_path / "m.txt", bom + MRPC_HEAD + b"1\t1\t2\tA  b .\tC d .\n0\t3\t4\tE\tF\n")
    s = read_mrpc_file(f)
    assert s.text1 == ["A b .", "E"] and s.text2 == ["C d .", "F"] and s.labels.tolist() == [1, 0]


def test_mrpc_errors_name_file_and_line(tmp_path):
    with pytest.raises(TaskDataError, match=r"h\.txt:1:.*header"):
        read_mrpc_file(write(tmp_path / "h.txt", b"1\t1\t2\tA\tB\n"))
    with pytest.raises(TaskDataError, match=r"l\.txt:3:.*label must lie in 0..1"):
        read_mrpc_file(write(tmp_path / "l.txt", MRPC_HEAD + b"1\t1\t2\tA\tB\n2\t1\t2\tA\tB\n"))
    with pytest.raises(TaskDataError, match=r"c\.txt:2:.*found 4"):
        read_mrpc_file(write(tmp_path / "c.txt", MRPC_HEAD + b"1\t1\tA\tB\n"))


def test_sst_layouts_and_errors(tmp_path):
    s2 = read_sst_file(write(tmp_path / "s2", b"a fine film \t1\nbad .\t0\n"), 2)
    assert s2.text1 == ["a fine film", "bad ."] and s2.labels.tolist() == [1, 0]
    s5 = read_sst_file(write(tmp_path / "s5", b"4 a stirring film\n0 awful\n"), 5)
    assert s5.text1 == ["a stirring film", "awful"] and s5.labels.tolist() == [4, 0]
    with pytest.raises(TaskDataError, match=r"b2:2:.*sentence<TAB>label"):
        read_sst_file(write(tmp_path / "b2", b"good\t1\nno label here\n"), 2)
    with pytest.raises(TaskDataError, match=r"b5:1:.*0..4"):
        read_sst_file(write(tmp_path / "b5", b"7 too high\n"), 5)
    with pytest.raises(TaskDataError, match=r"b6:1:.*integer"):
        read_sst_file(write(tmp_path / "b6", b"good\tyes\n"), 2)


def test_scicite_json_lines_and_errors(tmp_path):
    f = write(tmp_path / "c.txt", b'{"text": "We use  X [12].\\nThen", "label": "method", "metadata": {}}\n')
    assert read_scicite_file(f).text1 == ["We use X [12]. Then"]
    assert read_scicite_file(f, evalrank_text=True).text1 == ["we use x then"]  # EvalRank's a-z reduction
    with pytest.raises(TaskDataError, match=r"j\.txt:2:.*not a JSON object"):
        read_scicite_file(write(tmp_path / "j.txt", f.read_bytes() + b"{oops\n"))
    with pytest.raises(TaskDataError, match=r"k\.txt:1:.*unknown label 'other'"):
        read_scicite_file(write(tmp_path / "k.txt", b'{"text": "a", "label": "other"}\n'))


def test_cv_task_skips_blank_lines(tmp_path):
    write(tmp_path / "rt-polarity.pos", b"good .\n\n  great  film\n")
    write(tmp_path / "rt-polarity.neg", b"bad .\n")
    task = load_downstream_task("MR", tmp_path)
    assert task.cv.text1 == ["good .", "great film", "bad ."] and task.cv.labels.tolist() == [1, 1, 0]
    assert task.n_blank_lines == 1 and task.protocol == "cv"
    with pytest.raises(TaskDataError, match="unknown downstream task"):
        load_downstream_task("MRX", tmp_path)


def test_stratified_subsample_is_seeded_sorted_and_proportional():
    labels = np.array([0] * 700 + [1] * 200 + [2] * 100)
    idx = stratified_subsample(labels, 100, seed=7)
    assert len(idx) == 100 and np.all(np.diff(idx) > 0)
    assert np.bincount(labels[idx]).tolist() == [70, 20, 10]
    np.testing.assert_array_equal(idx, stratified_subsample(labels, 100, seed=7))
    assert not np.array_equal(idx, stratified_subsample(labels, 100, seed=8))
    # largest remainders: 3 rows from shares 0.7 / 0.2 / 0.1 -> 2.1, 0.6, 0.3 -> 2, 1, 0
    assert np.bincount(labels[stratified_subsample(labels, 3)], minlength=3).tolist() == [2, 1, 0]
    with pytest.raises(ValueError):
        stratified_subsample(labels, 0)


def test_subsample_train_touches_only_the_training_part(downstream):
    sst2 = downstream["SST2"]
    small = sst2.subsample_train(1000, seed=3)
    assert len(small.splits["train"]) == 1000
    assert small.splits["dev"] is sst2.splits["dev"] and small.splits["test"] is sst2.splits["test"]
    share = np.bincount(sst2.splits["train"].labels) / len(sst2.splits["train"])
    assert np.abs(np.bincount(small.splits["train"].labels) - 1000 * share).max() <= 1
    assert small.subsample_train(None) is small and sst2.subsample_train(10**6) is sst2
    assert small.splits["train"].text1 == sst2.subsample_train(1000, seed=3).splits["train"].text1
    mr = downstream["MR"].subsample_train(500)
    assert len(mr.cv) == 500 and np.bincount(mr.cv.labels).tolist() == [250, 250]
    # texts() is what must be embedded: every distinct text of every part, once
    texts = small.texts()
    assert len(texts) == len(set(texts))
    assert set(texts) == set(small.splits["train"].text1 + sst2.splits["dev"].text1 + sst2.splits["test"].text1)


def test_task_needs_splits_or_cv():
    part = LabelledSet(["a"], np.array([0]))
    with pytest.raises(ValueError, match="either splits or cv"):
        DownstreamTask("x", ("a", "b"))
    with pytest.raises(ValueError, match="train, test"):
        DownstreamTask("x", ("a", "b"), splits={"train": part})
