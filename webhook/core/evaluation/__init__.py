"""The evaluation: object + policy snapshot + config -> Decision, for the server and the CLI."""
