"""userdp transforms: Beam PTransforms over the pure mechanisms core in ``transforms.mechanisms``."""
