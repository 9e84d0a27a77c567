"""GPU placement: node inventory, CUDA and compute-capability rules, node terms, injection."""
