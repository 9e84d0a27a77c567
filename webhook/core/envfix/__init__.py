"""Environment fixes (SPEC §5): known-good env vars for known conflicts, never over a user's."""
