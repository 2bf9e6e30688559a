"""The byte-mutation strategy the reader fuzz tests share (tests/test_vector_files.py, test_task_file_fuzz.py)."""

from __future__ import annotations

from hypothesis import strategies as st


@st.composite
def mutated(draw: st.DrawFn, good: bytes, inserts: st.SearchStrategy[bytes]) -> bytes:
    """``good`` with a few bytes replaced, inserted (drawn from ``inserts``), deleted, or cut off; or random bytes."""
    if draw(st.booleans()):
        return draw(st.binary(max_size=200))
    data = bytearray(good)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["set", "insert", "delete", "truncate"]))
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        if op == "set" and data:
            data[at] = draw(st.integers(0, 255))
        elif op == "insert":
            data[at:at] = draw(inserts)
        elif op == "delete" and data:
            del data[at : at + draw(st.integers(1, 8))]
        elif op == "truncate":
            del data[at:]
    return bytes(data)
