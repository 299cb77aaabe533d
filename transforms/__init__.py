"""userdp transforms: Beam PTransforms over the pure core in ``transforms.mechanisms``."""
