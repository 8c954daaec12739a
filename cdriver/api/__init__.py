"""ComputeDomain API: the upstream contract's names, the CRD types and their REST resources
(`resources`, registered with `cdriver.kube`), opaque configs, IMEX modes."""
