"""Latency under load: the analytic queue of one replica (open loop) and the step-level simulation of the engine loop, with the loads and length distributions they run."""
