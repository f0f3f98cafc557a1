"""Latency under load: the analytic queue of one replica (open loop) and the step-level simulation of the engine loop, with the loads and length distributions they run."""

from typing import TYPE_CHECKING

from gpucap.lazy import public_names

if TYPE_CHECKING:
    from gpucap.queueing.analytic import max_request_rate as max_request_rate
    from gpucap.queueing.analytic import open_loop_latency as open_loop_latency
    from gpucap.queueing.lengths import Lengths as Lengths
    from gpucap.queueing.loads import Load as Load
    from gpucap.queueing.simulate import Simulation as Simulation
    from gpucap.queueing.simulate import kv_capacity_tokens as kv_capacity_tokens
    from gpucap.queueing.simulate import run_benchmark as run_benchmark

__getattr__, __dir__, __all__ = public_names(__name__, __file__)
