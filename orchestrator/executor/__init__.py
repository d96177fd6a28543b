"""The executor: the driver loop, trials as named steps, pools behind the ``Executor`` protocol
(base.py; Ray's in ray_pool.py), load generators, placement, and what touches the nodes."""
