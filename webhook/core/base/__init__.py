"""Foundations of every family: errors, JSON shapes, quantities, manifests, wording, versions."""
