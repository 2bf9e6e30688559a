"""The analyses over the warehouse and how they are shown: what reads the stored numbers of a zoo and answers a
question about it (which evaluator predicts which task, how sure that is, how the paper's tables come out), never
computing a model's numbers itself.

- :mod:`~evalfarm.analysis.correlations`: Spearman's rho of each intrinsic evaluator against each downstream task
  across the models, with seeded bootstrap intervals (stored in the warehouse);
- :mod:`~evalfarm.analysis.comparisons`: the statistics of dependent correlations (paired bootstraps over models and
  families, Steiger, Williams, Zou, Holm; the Fisher-z variance a scorer's interval uses);
- :mod:`~evalfarm.analysis.comparison_tables`: a table's tests of differences, stored (issue 41);
- :mod:`~evalfarm.analysis.robustness`: leave one family out; boards resampled over items;
- :mod:`~evalfarm.analysis.paper`: the EvalRank paper's layout and its published cells;
- :mod:`~evalfarm.analysis.mteb_results`: a warehouse in MTEB's results layout, and MTEB's results into one;
- :mod:`~evalfarm.analysis.report`: the static HTML report.

The package imports only the warehouse and what lies below it (catalog, plug-in registries, tie policies), so the
runner (which refreshes the intervals after a run) and the scorers (a correlation's interval) may use it; the API
runs it and the CLI prints it. Its own layers are pyproject.toml's contract ``analysis-layers``. Importing the
package imports none of its modules.
"""
