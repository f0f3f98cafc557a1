"""From a target load to a fleet: the search over GPUs, splits and formats, per-option capacity, disaggregated pools, the throughput-interactivity frontier and sizing from a trace."""

from typing import TYPE_CHECKING

from gpucap.lazy import public_names

if TYPE_CHECKING:
    from gpucap.planning.capacity import Headroom as Headroom
    from gpucap.planning.capacity import replicas_needed as replicas_needed
    from gpucap.planning.commands import plan_commands as plan_commands
    from gpucap.planning.disagg import check_by_simulation as check_by_simulation
    from gpucap.planning.disagg import compare_disaggregated as compare_disaggregated
    from gpucap.planning.interactivity import describe_point as describe_point
    from gpucap.planning.interactivity import interactivity_figure as interactivity_figure
    from gpucap.planning.interactivity import interactivity_frontier as interactivity_frontier
    from gpucap.planning.interactivity import option_points as option_points
    from gpucap.planning.result import Plan as Plan
    from gpucap.planning.result import Target as Target
    from gpucap.planning.result import describe_plan as describe_plan
    from gpucap.planning.result import recommended_lines as recommended_lines
    from gpucap.planning.result import summary_table as summary_table
    from gpucap.planning.search import plan as plan
    from gpucap.planning.tailcheck import TailCase as TailCase
    from gpucap.planning.tailcheck import compare_tails as compare_tails
    from gpucap.planning.tailcheck import judge as judge
    from gpucap.planning.trace import Trace as Trace
    from gpucap.planning.trace import TraceSizing as TraceSizing
    from gpucap.planning.trace import read_trace as read_trace
    from gpucap.planning.trace import size_trace as size_trace

__getattr__, __dir__, __all__ = public_names(__name__, __file__)
