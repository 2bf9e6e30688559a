"""The report's page templates (Jinja2, ``*.html.j2``), read with importlib.resources (package data of this package:
a wheel, and a wheel imported from a zip file, have them)."""
