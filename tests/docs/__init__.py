"""Tests of the documentation site: the generated references and the strict build."""
