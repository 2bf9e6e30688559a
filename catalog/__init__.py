"""The catalogs shipped with evalfarm: installed as the data package ``evalfarm._catalogs`` (see pyproject.toml).

This folder stays at the top of the repository for people editing catalogs; the package mapping puts its YAML
files inside the wheel, where ``evalfarm.catalog.registry`` finds them with importlib.resources.
"""
