"""Text and figures of results; no physics. Each function takes an object with the attributes it reads."""

from typing import TYPE_CHECKING

from gpucap.lazy import public_names

if TYPE_CHECKING:
    from gpucap.report.planplots import CHEAPEST as CHEAPEST
    from gpucap.report.planplots import frontier as frontier
    from gpucap.report.planplots import frontier_figure as frontier_figure
    from gpucap.report.planplots import latency_vs_rate as latency_vs_rate
    from gpucap.report.planplots import latency_vs_rate_figure as latency_vs_rate_figure
    from gpucap.report.planplots import rejected_counts as rejected_counts
    from gpucap.report.planplots import simulated_latency as simulated_latency
    from gpucap.report.plots import history_figure as history_figure
    from gpucap.report.plots import limits_figure as limits_figure
    from gpucap.report.plots import predicted_vs_measured_figure as predicted_vs_measured_figure
    from gpucap.report.plots import sweep_figure as sweep_figure
    from gpucap.report.telemetryplots import steps_figure as steps_figure
    from gpucap.report.telemetryplots import windows_figure as windows_figure

__getattr__, __dir__, __all__ = public_names(__name__, __file__)
