"""Accelerator device families as data (SPEC §13): per vendor, the resources that count its
devices, the variables and device nodes its runtimes honour, and its placement rule.

The stable API other families use: `FAMILIES`, `Family`, `family_of(resource)`,
`family_named(name)`, `is_device_path(path)`.
"""

from webhook.core.families.catalog import (
    FAMILIES,
    Family,
    family_named,
    family_of,
    is_device_path,
)

__all__ = ["FAMILIES", "Family", "family_named", "family_of", "is_device_path"]
