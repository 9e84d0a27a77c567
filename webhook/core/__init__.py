"""The evaluation core: pure functions over plain data (policies, config, objects -> Decision).

Imports the standard library, pydantic and PyYAML only: no I/O library and no edge package.
Its subpackages are its families, from the foundations up: base; images and kinds; config;
workloads; outcome; policies; placement, access and envfix (the rule families); evaluation
(the one entry the server, the CLI and the tests call); audit. `.importlinter` holds what each
may import.
"""
