"""Fuzzing every task-file reader a catalog can reach (issue 23): random bytes and mutated valid files.

Whatever the bytes, a reader returns its rows or raises :class:`TaskDataError` / ``ValueError`` naming the file:
never another exception, never a hang. Seeded (the conftest's ``ci`` profile derandomizes), small files, at most
40 examples a reader."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evalfarm.taskdata import downstream, evalrank, sts, wordsim
from evalfarm.taskdata.data import TaskDataError
from tests.support.fuzz import mutated

pytestmark = pytest.mark.faults  # issue 23: fuzzed readers (`make faults`)

SICK = "\t".join(sts.SICK_HEADER) + "\n1\tA man plays.\tA man is playing.\t4.5\tENTAILMENT\n"
MRPC = "\ufeff" + "\t".join(downstream.MRPC_HEADER) + "\n1\t11\t12\tA man plays.\tA man is playing.\n"
STR = 'Index,SourceID,SubsetID,PairID,Text,Score\n0,a,b,c,"A man plays.\nA man is playing.",0.75\n'

READERS: dict[str, tuple[Callable[[Path], Any], str]] = {
    "wordsim": (wordsim.read_wordsim, "tiger cat 7.35\nbook paper 7.46\n"),
    "stsb": (lambda p: sts.read_stsb_file(p, "test"), "main\tMSRvid\t2012\t0001\t5.000\tA man.\tA man plays.\n"),
    "sick": (sts.read_sick_file, SICK),
    "str": (sts.load_str, STR),
    "evalrank-pairs": (evalrank.read_pairs, "cat\ttiger\nbook\tpaper\n"),
    "evalrank-items": (evalrank.read_items, "cat\ntiger\n"),
    "sst2": (lambda p: downstream.read_sst_file(p, 2), "a fine film\t1\na dull one\t0\n"),
    "sst5": (lambda p: downstream.read_sst_file(p, 5), "4 a fine film\n0 a dull one\n"),
    "trec": (downstream.read_trec_file, "NUM:date When was it ?\nHUM:ind Who was it ?\n"),
    "mrpc": (downstream.read_mrpc_file, MRPC),
    "sick-e": (downstream.read_sick_e_file, SICK),
    "scicite": (downstream.read_scicite_file, '{"text": "As shown in [1].", "label": "method"}\n'),
}


def _mutated(good: bytes) -> st.SearchStrategy[bytes]:
    """``good`` mutated, inserting the characters task files split on."""
    return mutated(good, st.sampled_from([b"\t", b"\n", b"\r", b" ", b'"', b",", b"\x00", b"\xff", b"nan"]))


@pytest.mark.parametrize("reader", sorted(READERS))
@settings(max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_task_file_readers_fuzzed(reader: str, data: st.DataObject) -> None:
    read, good = READERS[reader]
    raw = data.draw(_mutated(good.encode("utf-8")))
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "fuzz-task.txt"
        path.write_bytes(raw)
        try:
            read(path)
        except (TaskDataError, ValueError) as exc:
            assert "fuzz-task.txt" in str(exc), str(exc)


@pytest.mark.parametrize("reader", sorted(READERS))
def test_the_fuzzed_readers_read_their_valid_samples(tmp_path: Path, reader: str) -> None:
    """The control: every sample the fuzzing starts from is valid, so the mutations explore near real files."""
    read, good = READERS[reader]
    (tmp_path / "good.txt").write_text(good, encoding="utf-8")
    read(tmp_path / "good.txt")


def test_a_csv_field_over_the_csv_limit_names_the_file(tmp_path: Path) -> None:
    """The csv module refuses fields over 128 KiB with its own ``csv.Error``: the STR reader names file and line."""
    path = tmp_path / "str.csv"
    path.write_text(STR.replace("A man plays.", "x" * 200_000))
    with pytest.raises(TaskDataError, match=r"str\.csv:\d+: not a readable CSV record \(field larger than"):
        sts.load_str(path)
