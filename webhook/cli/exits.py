"""Exit codes shared by every command."""

EXIT_OK = 0
EXIT_DENIED = 1  # something would be denied (review) or a ConfigMap is invalid (lint)
EXIT_USAGE = 2  # the input or the command line is unusable


class CommandError(Exception):
    """The command cannot do its job (e.g. the cluster cannot be read): one line, exit 2."""
