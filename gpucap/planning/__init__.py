"""From a target load to a fleet: the search over GPUs, splits and formats, per-option capacity, disaggregated pools, the throughput-interactivity frontier and sizing from a trace."""
