"""What an evaluation concludes (Decision, Violation) and the per-pod state rules fill."""
