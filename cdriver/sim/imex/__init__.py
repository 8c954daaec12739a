"""IMEX for nodes without GPUs: the stand-ins and the host-managed IMEX service.

`nvidia_imex.py` and `nvidia_imex_ctl.py` stand in for NVIDIA's `nvidia-imex` and
`nvidia-imex-ctl` (NO GPU mode); both speak the small protocol in protocol.py. (The driver's
own client of `nvidia-imex-ctl` is `cdriver.imex.ctl`.) A simulated node's driver root carries
wrapper scripts under the real names that exec `cdriver sim imex daemon|ctl "$@"` (see
`cdriver.sim.gpu.driver_root`), so the stand-in keeps the wrapper's PID and receives the
supervisor's signals directly. `python -m cdriver.sim.imex.nvidia_imex` / `.nvidia_imex_ctl`
run them too. `host_service.py` is the administrator's `nvidia-imex` service of host-managed
mode; `cli.py` holds `cdriver sim imex` and `cdriver sim host-imex`.
"""
