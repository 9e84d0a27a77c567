"""The workload registry as data: where each kind keeps its pod templates; the built-in kinds."""
