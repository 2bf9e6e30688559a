"""Helpers shared by the tests and the benchmark scripts; nothing here is a test, and evalfarm never imports it.

- ``ray_heads``: the Ray heads tests and benchmarks start (start-head.sh on free ports, evalfarm's local Ray), each
  checked to listen on loopback only, and stopped by their own process session.
- ``toolkit_oracle``: an independent port of the EvalRank toolkit's word protocol (imports no evalfarm).
- ``conformance_harness``: the pipeline side of the conformance check (tests/test_protocol.py,
  benchmarks/conformance.py).
- ``faults_harness``: benchmarks/faults.py loaded as a module (tests/test_faults.py, test_autoscale.py).
- ``http_files``: a folder served over http on 127.0.0.1 (download tests; with ``EVALFARM_ALLOW_HTTP=1``); a flaky
  first answer and redirects on request.
- ``wheel_venv``: the evalfarm wheel built from a clean copy of the sources and installed into a fresh venv.
- ``trees``: a folder's entries (links not followed) to compare before and after an attack; the toy catalog.

Tests import ``tests.support.<module>`` (pytest puts the repository root on ``sys.path``: ``tests`` is a package);
a benchmark script puts the repository root on ``sys.path`` once, at its top, for ``evalfarm`` and this package.
"""
