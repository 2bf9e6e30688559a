"""Reading the evaluation text files with a declared encoding, so no byte is ever guessed.

Every reader in ``wordsim``, ``sts`` and ``downstream`` goes through :func:`read_lines`: the file is decoded
strictly with the encoding its reader declares, a UTF-8 byte-order mark is dropped, CRLF line ends lose their
``\\r``, and lines are split on ``\\n`` only (``str.splitlines`` would also split on U+2028, U+0085, form feeds…
and silently shift the pairing of an input file with its gold file). What the bytes of the real files are
(checked with the files' bytes, see each module's docstring):

============================================  ===================================  ==========================
file(s)                                       bytes                                read as
============================================  ===================================  ==========================
downstream/TREC/train_5500.label              one 0xF0 byte (line 66), not UTF-8   latin-1 (as SentEval)
downstream/TREC/TREC_10.label                 ASCII                                latin-1 (as SentEval)
downstream/MRPC/msr_paraphrase_*.txt          UTF-8 with a BOM                     utf-8, BOM dropped
sts/SICK/SICK_test_annotated.txt (= SICK-E)   CRLF line ends                       utf-8, ``\\r`` dropped
sts/STSBenchmark-raw/sts-train.csv            CRLF line ends                       utf-8, ``\\r`` dropped
wordsim: WS-353-ALL, MTurk-771, VERB-143,     CRLF line ends (SimVerb and          utf-8, ``\\r`` dropped
SimVerb-3500                                  MTurk-287 lack the final newline)
everything else                               UTF-8 (most of it ASCII), LF         utf-8
============================================  ===================================  ==========================

A file that does not decode is an error naming ``file:line``, never a silent replacement character.

GoEmotions (``heros/goemotions_fallback/*.tsv``: ``text<TAB>labels<TAB>id``) is quoted CSV-style: a text holding a
``"`` is wrapped in quotes with its own quotes doubled (137 of dev's 5,426 lines, 149 of test's 5,427, 1,097 of
train's 43,410); :func:`read_quoted_tsv` reads it unquoted (``csv`` with a tab delimiter, strict).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from evalfarm.taskdata.data import TaskDataError

UTF8 = "utf-8"
LATIN1 = "latin-1"
_BOM = b"\xef\xbb\xbf"


def read_text(path: Path, encoding: str = UTF8) -> str:
    """The whole file decoded strictly; a leading UTF-8 BOM is dropped (it is never data)."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise TaskDataError(f"{path}: file not found") from None
    if encoding == UTF8 and raw.startswith(_BOM):
        raw = raw[len(_BOM) :]
    try:
        return raw.decode(encoding)
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise TaskDataError(
            f"{path}:{line}: not valid {encoding} (byte 0x{raw[exc.start]:02x}: {exc.reason}); "
            "the file is not the expected version, or needs another encoding"
        ) from None


def read_lines(path: Path, encoding: str = UTF8) -> list[str]:
    """Lines split on ``\\n`` only, each without its ``\\r``; no empty last line for a final newline."""
    text = read_text(path, encoding)
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def read_quoted_tsv(path: Path, columns: int, encoding: str = UTF8) -> list[tuple[int, list[str]]]:
    """``(line number, fields)`` of a tab-separated file quoted CSV-style (a field holding ``"`` is wrapped in
    ``"..."`` with its quotes doubled: GoEmotions' files, written by pandas), unquoted, each row with exactly
    ``columns`` fields. A row with another count, or a quote left open, is an error naming ``file:line``."""
    import csv
    import io

    text = read_text(path, encoding)
    out: list[tuple[int, list[str]]] = []
    reader = csv.reader(io.StringIO(text, newline=""), delimiter="\t", quotechar='"', doublequote=True, strict=True)
    lineno = 1
    try:
        for fields in reader:
            if fields and not (len(fields) == 1 and not fields[0]):
                if len(fields) != columns:
                    raise malformed(
                        path,
                        lineno,
                        f"expected {columns} tab-separated columns, found {len(fields)}",
                        "\t".join(fields),
                    )
                out.append((lineno, fields))
            lineno = reader.line_num + 1
    except csv.Error as exc:
        raise TaskDataError(f"{path}:{lineno}: not a CSV-quoted tab-separated row ({exc})") from None
    return out


def normalize_space(text: str) -> str:
    """SentEval's view of a sentence: its whitespace tokens joined by one space (``" ".join(s.split())``)."""
    return " ".join(text.split())


def malformed(path: Path, lineno: int, what: str, line: str) -> TaskDataError:
    """An error naming ``file:line``, what was expected, and the start of the offending line."""
    return TaskDataError(f"{path}:{lineno}: {what}, got {line[:100]!r}")


def sentence_pair_rows(
    path: Path, header: tuple[str, ...], name: str, columns: tuple[int, int]
) -> Iterator[tuple[int, list[str], str, str, str]]:
    """The rows of a tab-separated file of sentence pairs under a ``header`` line (SICK, MRPC): ``(lineno, fields,
    line, a, b)`` for each non-blank row, ``a`` and ``b`` the space-normalised sentences of ``columns``. The
    header, each row's column count and both sentences are checked; an error names ``file:line``."""
    lines = read_lines(path)
    if not lines or tuple(lines[0].strip().split("\t")) != header:
        raise malformed(path, 1, f"expected the {name} header {' '.join(header)!r}", lines[0] if lines else "")
    for lineno, line in enumerate(lines[1:], 2):
        if not line.strip():
            continue
        fields = line.strip().split("\t")
        if len(fields) != len(header):
            raise malformed(path, lineno, f"expected {len(header)} tab-separated columns, found {len(fields)}", line)
        a, b = normalize_space(fields[columns[0]]), normalize_space(fields[columns[1]])
        if not a or not b:
            raise malformed(path, lineno, "empty sentence", line)
        yield lineno, fields, line, a, b
