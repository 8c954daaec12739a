"""Generated gRPC stubs; regenerate with `python -m cdriver.dra.codegen`."""
