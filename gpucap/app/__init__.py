"""The interactive pages: the ipywidgets estimator and planner, their SVG figures, and the server that serves them to colleagues who do not code."""

from typing import TYPE_CHECKING

from gpucap.lazy import public_names

if TYPE_CHECKING:
    from gpucap.app.planwidgets import PlannerApp as PlannerApp
    from gpucap.app.planwidgets import plans_html as plans_html
    from gpucap.app.widgets import EstimatorApp as EstimatorApp

__getattr__, __dir__, __all__ = public_names(__name__, __file__)
