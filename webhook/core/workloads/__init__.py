"""Admitted objects as workloads: pod specs, DRA claims, the device names NVIDIA reads."""
