"""The chart's accelerators values (SPEC §13, issue 45's partial configs, issue 47 item 3): an
override of one vendor key renders a section the webhook reads with the shipped label settings,
and admin rows reach the webhook's tables."""

from __future__ import annotations

from pathlib import Path

from tests.chart.conftest import Render
from tests.chart.test_chart import FULLNAME, one
from webhook.core.config.accelerators import DEFAULT_CANN, DEFAULT_ROCM
from webhook.core.config.model import load_config
from webhook.core.placement.vendors import in_force, vendor_named


def test_an_image_table_override_keeps_the_label_settings(render: Render, tmp_path: Path) -> None:
    objects = render(
        {
            "config": {
                "accelerators": {
                    "rocm": {
                        "imageTable": [{"image": "registry.corp/ml/*", "version": "7.2"}],
                        "modules": [{"value": "6.16.6", "release": "30.20", "source": "dkms"}],
                    }
                }
            }
        }
    )
    path = tmp_path / "config.yaml"
    path.write_text(one(objects, "ConfigMap", FULLNAME)["data"]["config.yaml"], encoding="utf-8")
    config = load_config(path)
    rocm = config.accelerators.rocm
    assert rocm.driver_labels == DEFAULT_ROCM.driver_labels
    assert rocm.device_labels == DEFAULT_ROCM.device_labels
    assert config.accelerators.cann == DEFAULT_CANN
    assert [i.version for i in rocm.image_table] == ["7.2"]
    # The admin's module row is read before the shipped ones; the shipped ones stay.
    vendor = vendor_named("rocm")
    assert vendor is not None
    tables = in_force(vendor, rocm)
    assert tables.release_of_module("6.16.6") == "30.20"
    assert tables.release_of_module("6.19.14.31400000") == "31.40"
