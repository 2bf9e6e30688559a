"""Scorers: evaluators that read stored embeddings and write metric rows. ``rank_kernel`` is EvalRank's kernel."""
