"""The warehouse's DuckDB views: installed as the data package ``evalfarm._sql`` (see pyproject.toml).

This folder stays at the top of the repository; the package mapping puts its ``*.sql`` files inside the wheel,
where ``evalfarm.warehouse`` finds them with importlib.resources.
"""
