"""`cdriver kubelet-plugin`: the DRA node plugin for IMEX channels and IMEX daemons."""
