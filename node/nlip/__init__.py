"""POST /nlip: the six primitives for NLIP clients."""
