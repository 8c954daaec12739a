"""Images of the local cluster's real nodes (driver, pause, workload): their references, and
`cdriver sim images`, which runs the release builder (packaging/cdriver_build) of a checkout."""
