"""ComputeDomain API types, opaque configs and the project's constants."""
