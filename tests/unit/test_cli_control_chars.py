"""Control characters from manifests never reach the CLI's output raw: ESC (terminal escape
sequences), BEL, NUL and the other C0 characters, DEL and the C1 characters (U+009B is a CSI on
its own) in names, images and messages are written as `\\uXXXX`, in text, JSON (where that is
the same string), JUnit XML (which must parse) and the one-line errors on stderr."""

from __future__ import annotations

import json
import re
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
import yaml

from tests.helpers import CONFIGMAPS
from tests.unit.test_cli import cli, write

# ESC [2J (clear the screen), BEL, NUL, SOH, a carriage return, DEL, CSI (C1) 31m, NEL (C1).
HOSTILE = "\x1b[2J\x07\x00\x01\r\x7f\x9b31m\x85"
SHOWN = "\\u001b[2J\\u0007\\u0000\\u0001\\u000d\\u007f\\u009b31m\\u0085"
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")

POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": f"gpu{HOSTILE}pod", "namespace": "ml"},
    "spec": {
        "containers": [
            {
                "name": f"app{HOSTILE}",
                "image": f"registry.example/app{HOSTILE}:1.0",
                "resources": {"limits": {"tencent.com/vcuda-core": "150"}},
            }
        ]
    },
}


def test_review_text_escapes_names_images_and_messages(tmp_path: Path) -> None:
    manifest = write(tmp_path / "pod.yaml", POD)
    code, text = cli("review", "-f", str(manifest), "--policies", str(CONFIGMAPS))
    assert code == 1  # vcuda-core 150: denied
    assert RAW.search(text) is None, repr(text)
    assert text.startswith(f"--- Pod ml/gpu{SHOWN}pod ({manifest}, document 1): DENIED\n")
    assert f'Pod ml/gpu{SHOWN}pod, container "app{SHOWN}": limits.tencent.com/vcuda-core' in text
    assert f"registry.example/app{SHOWN}:1.0" in text


def test_review_json_keeps_the_strings(tmp_path: Path) -> None:
    """JSON escapes C0 itself; C1 written as \\u0085 is the same string once parsed."""
    manifest = write(tmp_path / "pod.yaml", POD)
    code, text = cli("review", "-f", str(manifest), "--policies", str(CONFIGMAPS), "-o", "json")
    assert code == 1
    assert RAW.search(text) is None, repr(text)
    (result,) = json.loads(text)
    assert result["object"] == f"Pod ml/gpu{HOSTILE}pod"
    assert any(f'container "app{HOSTILE}"' in line for line in result["violations"])


def test_test_junit_is_xml_and_the_text_is_escaped(tmp_path: Path) -> None:
    write(tmp_path / "resources.yaml", POD)
    test = {
        "apiVersion": "gpu-webhook.dev/v1alpha1",
        "kind": "Test",
        "metadata": {"name": f"t{HOSTILE}"},
        "policies": str(CONFIGMAPS),
        "resources": ["resources.yaml"],
        # Fails: the pod is denied, so the failure lists the violation, naming the container.
        "results": [{"name": f"gpu{HOSTILE}pod", "verdict": "allowed"}],
    }
    write(tmp_path / "gpu-webhook-test.yaml", test)
    code, text = cli("test", str(tmp_path), "-o", "junit")
    assert code == 1
    assert RAW.search(text) is None, repr(text)
    root = ET.fromstring(text.split("\n", 1)[1])
    (suite,) = root
    assert suite.get("name") == f"t{SHOWN}"
    (case,) = suite
    assert case.get("name") == f"Pod ml/gpu{SHOWN}pod (resources.yaml#1)"
    failure = case.find("failure")
    assert failure is not None
    assert f'container "app{SHOWN}"' in (failure.text or "")
    code, text = cli("test", str(tmp_path), "--detailed-results")
    assert code == 1
    assert RAW.search(text) is None, repr(text)
    assert f"Pod ml/gpu{SHOWN}pod (resources.yaml#1)" in text


def test_lint_and_the_error_line_escape_a_configmap_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    crl = yaml.safe_load((CONFIGMAPS / "cf-crl-nvidia-gpu.yaml").read_text(encoding="utf-8"))
    crl["metadata"]["name"] = f"cf-crl-{HOSTILE}-gpu"
    write(tmp_path / "crl.yaml", crl)
    code, text = cli("lint", str(tmp_path))
    assert code == 1
    assert RAW.search(text) is None, repr(text)
    assert f"kube-public/cf-crl-{SHOWN}-gpu" in text
    manifest = write(tmp_path / "pod.yaml", POD)
    assert cli("review", "-f", str(manifest), "--policies", str(tmp_path)) == (2, "")
    err = capsys.readouterr().err
    assert RAW.search(err) is None, repr(err)
    assert f"kube-public/cf-crl-{SHOWN}-gpu" in err
