"""Audit and policy reports: what the evaluation says of objects that already run."""
