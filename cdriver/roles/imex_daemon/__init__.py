"""The per-ComputeDomain IMEX daemon role: join the clique, run nvidia-imex, report readiness."""
