"""The whole simulated cluster: control plane, nodes and the driver chart; scenarios and the demo."""
