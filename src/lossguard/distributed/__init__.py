"""Large runs: FSDP2 statistics, restarts under ``torchrun``, hang detection.

- :mod:`.fsdp`: the global gradient norm over sharded (DTensor) parameters without gathering them,
  and every rank's step statistics from one small all-reduce, so every rank reaches the same verdict.
- :mod:`.restart`: the documented exit codes, relaunch detection, and a process-group start that is
  safe across ``torchrun --max-restarts`` restarts (upstream pytorch issue 135712).
- :mod:`.heartbeat`: a watchdog thread that ends a rank stuck for too long with a documented exit
  code, so the launcher restarts the job.
- :mod:`.clean_exit`: at exit, wait for asynchronous saves and destroy the process groups (a gloo
  job that skips it aborts at exit in ~1 of 4 runs).

Importing this package does not import torch; the modules do.
"""
