"""The wheel's packages, discovered: every folder of gpucap/ with an ``__init__.py``, and data/
shipped as ``gpucap.data`` (the catalog travels with an installed wheel). Everything else about
the package is in pyproject.toml."""

from setuptools import find_packages, setup

setup(packages=[*find_packages(include=["gpucap", "gpucap.*"]), "gpucap.data"])
