"""Images of the local cluster's real nodes (driver, pause, workload), built without a container engine."""
