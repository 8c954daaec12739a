"""The ComputeDomain controller role (`cdriver controller`)."""
