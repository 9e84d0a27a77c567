"""The three rule families: CRL resources, CUDA node affinity, environment fixes. All pure."""
