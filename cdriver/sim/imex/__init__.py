"""IMEX stand-ins: `nvidia-imex` (daemon.py) and `nvidia-imex-ctl` (ctl.py) for nodes without GPUs.

Both speak the small protocol in protocol.py. A simulated node's driver root carries wrapper
scripts under the real names that exec `cdriver sim imex daemon|ctl "$@"` (see
`cdriver.sim.gpu.driver_root`), so the stand-in keeps the wrapper's PID and receives the
supervisor's signals directly. `python -m cdriver.sim.imex.daemon` / `.ctl` run them too.
"""
