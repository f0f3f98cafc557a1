"""The interactive pages: the ipywidgets estimator and planner, their SVG figures, and the server that serves them to colleagues who do not code."""
