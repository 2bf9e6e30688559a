"""Issue 40, item 3: a ``path`` model source reads only where the user allows, and no file's content travels.

The attacks: a third-party catalog names ``/etc/...``, ``~/.ssh/...``, a file beside the catalog, or a symlink
planted in an allowed folder, as a model's vectors; and a one-line secret (a credentials file, a token) named as a
model, whose first line the load error used to copy into ``failures``, the run's output and the HTML report.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from evalfarm.catalog.specs import Source
from evalfarm.encoders.protocol import ModelLoadError
from evalfarm.encoders.sources import resolve_source

pytestmark = pytest.mark.faults  # issue 40 (`make faults`)

REPO = Path(__file__).resolve().parents[1]
TASKS = REPO / "catalog" / "tasks.yaml"
SECRET = "Zq8xKv3Lm9TpWc4Rn7Yb"
"""A credentials line's secret: random letters, so that no 6 of them in a row occur in any honest output."""


def _fragments(text: str, n: int = 6) -> list[str]:
    return [text[i : i + n] for i in range(len(text) - n + 1)]


def _leaks(text: str) -> list[str]:
    """The pieces of the secret found in ``text`` (any 6 characters of it in a row)."""
    return [f for f in _fragments(SECRET) if f in text]


@pytest.fixture
def places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A data folder, a cache, a models folder the user allows, a HOME with a secret, and a folder outside all of
    them holding the catalog and another secret beside it."""
    out = {name: tmp_path / name for name in ("data", "cache", "models", "home", "outside")}
    for d in out.values():
        d.mkdir()
    (out["home"] / ".ssh").mkdir()
    for secret in (out["home"] / ".ssh" / "id_rsa", out["outside"] / "creds", out["models"] / "creds"):
        secret.write_text(f"AWS_SECRET_ACCESS_KEY={SECRET}\n")
    monkeypatch.setenv("EVALFARM_DATA", str(out["data"]))
    monkeypatch.setenv("EVALFARM_CACHE", str(out["cache"]))
    monkeypatch.setenv("EVALFARM_MODEL_PATHS", str(out["models"]))
    monkeypatch.setenv("HOME", str(out["home"]))
    return out


@pytest.mark.parametrize(
    "ref",
    ["absolute", "tilde", "beside the catalog", "symlink in an allowed folder", "folder, then a link inside it"],
)
def test_a_path_source_cannot_read_outside_the_folders_the_user_allows(places, ref) -> None:
    path = None
    if ref == "absolute":
        src, base = str(places["outside"] / "creds"), None
    elif ref == "tilde":
        src, base = "~/.ssh/id_rsa", None
    elif ref == "beside the catalog":  # a catalog in ~/Downloads naming a file next to it
        src, base = "creds", places["outside"]
    elif ref == "symlink in an allowed folder":
        (places["models"] / "vectors.txt").symlink_to(places["outside"] / "creds")
        src, base = str(places["models"] / "vectors.txt"), None
    else:
        (places["models"] / "model").mkdir()
        (places["models"] / "model" / "vectors.txt").symlink_to(places["home"] / ".ssh" / "id_rsa")
        src, base, path = str(places["models"] / "model"), None, "vectors.txt"
    with pytest.raises(ModelLoadError, match=r"lies outside the folders model files may be read from") as err:
        resolve_source(Source(type="path", ref=src, path=path), base_dir=base)
    message = str(err.value)
    assert "EVALFARM_MODEL_PATHS" in message and "model_paths" in message and not _leaks(message)


def test_a_path_source_reads_the_data_folder_the_cache_and_the_named_folders(places, tmp_path) -> None:
    from evalfarm.config import resolve_settings

    for folder in ("data", "cache", "models"):
        (places[folder] / "v.txt").write_text("a 1 2\n")
        assert resolve_source(Source(type="path", ref=str(places[folder] / "v.txt"))) == places[folder] / "v.txt"
    assert resolve_source(Source(type="path", ref="v.txt"), base_dir=places["models"]) == places["models"] / "v.txt"
    # a folder named in .evalfarm.toml (relative to the file), exported as every command and API call does
    (places["outside"] / "mine").mkdir()
    (places["outside"] / "mine" / "v.txt").write_text("a 1 2\n")
    cfg = places["outside"] / ".evalfarm.toml"
    cfg.write_text('model_paths = "mine"\n')
    os.environ.pop("EVALFARM_MODEL_PATHS")
    mine = Source(type="path", ref=str(places["outside"] / "mine" / "v.txt"))
    with pytest.raises(ModelLoadError, match="lies outside"):
        resolve_source(mine)
    with resolve_settings(config_file=cfg).data_exported():
        assert resolve_source(mine) == places["outside"] / "mine" / "v.txt"


FORMATS = ["glove-text", "word2vec-text", "word2vec-binary", "gensim-kv", "numpy-vocab"]


@pytest.mark.slow  # two evalfarm commands in subprocesses
def test_a_secret_named_as_a_model_appears_nowhere(places, toy_glove, tmp_path) -> None:
    """Every word-vector format over a one-line secret inside an allowed folder, and one outside: each model fails,
    and no piece of the secret is in the warehouse (any table), the run's output, or the HTML report."""
    creds = places["models"] / "creds"
    models = [
        f"  - {{id: leak-{fmt}, level: word, kind: word-vectors, format: {fmt}, source: {{type: path, ref: {creds}}}"
        + (", allow_pickle: true" if fmt == "gensim-kv" else "")
        + (", vocab: creds" if fmt == "numpy-vocab" else "")
        + "}\n"
        for fmt in FORMATS
    ]
    models.append(
        "  - {id: leak-outside, level: word, kind: word-vectors, format: glove-text,"
        f" source: {{type: path, ref: {places['outside'] / 'creds'}}}}}\n"
    )
    (places["data"] / "toy.txt").write_bytes(toy_glove.read_bytes())  # an honest model: a report with a board
    models.append(
        "  - {id: toy, level: word, kind: word-vectors, format: glove-text,"
        f" source: {{type: path, ref: {places['data'] / 'toy.txt'}}}}}\n"
    )
    catalog = places["outside"] / "third-party.yaml"
    catalog.write_text(f"include: [{TASKS}]\ntasks: [wordsim-rg-65]\nmodels:\n{''.join(models)}")
    wh, report = tmp_path / "wh", tmp_path / "report"
    env = {**os.environ, "EVALFARM_DATA": str(REPO.parent / "shared" / "data")}
    env["EVALFARM_MODEL_PATHS"] = os.pathsep.join([str(places["models"]), str(places["data"])])
    run = subprocess.run(
        [sys.executable, "-m", "evalfarm", "run", "--catalog", str(catalog), "--warehouse", str(wh),
         "--executor", "local"],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert run.returncode == 1, run.stderr[-3000:]  # the leaks failed, the honest model did not
    out = run.stdout + run.stderr
    assert not _leaks(out), f"the run's output holds pieces of the secret: {_leaks(out)}"
    assert out.count("FAILED leak-") == len(FORMATS) + 1 and "lies outside the folders" in out, out[-3000:]
    rep = subprocess.run(
        [sys.executable, "-m", "evalfarm", "report", "--out", str(report), "--warehouse", str(wh)],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert rep.returncode == 0, rep.stderr[-3000:]
    failures = pq.read_table(wh / "tables" / "failures").to_pylist()
    assert {r["model"] for r in failures} >= {f"leak-{fmt}" for fmt in FORMATS} | {"leak-outside"}
    warehouse_text = "\n".join(json.dumps(pq.read_table(p).to_pylist(), default=str) for p in wh.rglob("*.parquet"))
    report_text = "\n".join(p.read_text(errors="replace") for p in report.rglob("*") if p.is_file())
    for where, text in (("the warehouse", warehouse_text), ("the report", report_text)):
        assert not _leaks(text), f"{where} holds pieces of the secret: {_leaks(text)}"
    assert "failures" in report_text.lower() and "leak-glove-text" in report_text  # the report does show them
