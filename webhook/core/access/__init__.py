"""GPU access control (SPEC §12): which containers reach GPUs without requesting them."""
