"""The evaluation core: pure functions over plain data (policies, config, objects -> Decision).

Imports the standard library, pydantic and PyYAML only: no I/O library and no edge package.
"""
