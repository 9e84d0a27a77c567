"""The shipped configmaps/: each file is one valid, enabled CRL and together they load cleanly."""

from __future__ import annotations

import pytest

from tests.helpers import CONFIGMAPS
from webhook.core.policies.crl import LimitsPolicy, RequestsPolicy, key_name_forms, parse_configmap
from webhook.sources.files import load_policy_dir, read_documents

FILES = sorted(p.name for p in CONFIGMAPS.glob("*.yaml"))


def test_there_are_shipped_files() -> None:
    assert len(FILES) >= 5


@pytest.mark.parametrize("name", FILES)
def test_each_file_is_one_valid_enabled_crl(name: str) -> None:
    docs = read_documents(CONFIGMAPS / name)
    assert len(docs) == 1
    parsed = parse_configmap(docs[0])
    assert parsed.errors == ()
    assert parsed.warnings == ()
    assert parsed.active
    assert parsed.limitation is not None
    # the file is named after the ConfigMap, which follows cf-crl-{group}-{keyName}
    assert name == f"{parsed.name}.yaml"
    assert parsed.limitation.description_en
    assert parsed.name.endswith(key_name_forms(parsed.limitation.key))


def test_loaded_set() -> None:
    ps = load_policy_dir(CONFIGMAPS)
    assert ps.invalid == () and ps.conflicts == () and ps.inactive == ()
    assert {
        "tencent.com/vcuda-core",
        "tencent.com/vcuda-memory",
        "nvidia.com/gpu",
        "nvidia.com/mps-core",
        "nvidia.com/gpumem",
        "nvidia.com/gpucores",
    } <= ps.keys
    assert {"gpu-manager", "nvidia", "mps", "hami"} <= set(ps.by_group)
    assert {lim.key for lim in ps.by_group["gpu-manager"]} == {
        "tencent.com/vcuda-core",
        "tencent.com/vcuda-memory",
    }


def test_vcuda_core_policy() -> None:
    core = load_policy_dir(CONFIGMAPS).by_key["tencent.com/vcuda-core"]
    assert core.whole_unit == 100
    assert core.limits is LimitsPolicy.OPTIONAL
    assert core.requests is RequestsPolicy.DISABLED
    assert core.default is not None and 0 < core.default <= 100


def test_vcuda_memory_has_a_default() -> None:
    memory = load_policy_dir(CONFIGMAPS).by_key["tencent.com/vcuda-memory"]
    assert memory.default is not None and memory.default > 0


def test_nvidia_gpu_requests_follow_limits() -> None:
    gpu = load_policy_dir(CONFIGMAPS).by_key["nvidia.com/gpu"]
    assert gpu.requests is RequestsPolicy.FROM_LIMITS
    assert gpu.default is None  # never give a pod a physical GPU it did not ask for


@pytest.mark.parametrize("key", ["nvidia.com/gpucores", "nvidia.com/mps-core"])
def test_percentages_are_capped_at_100(key: str) -> None:
    assert load_policy_dir(CONFIGMAPS).by_key[key].max == 100


def test_amd_and_ascend_sets() -> None:
    ps = load_policy_dir(CONFIGMAPS)
    assert {lim.key for lim in ps.by_group["amd"]} == {"amd.com/gpu"}
    assert {lim.key for lim in ps.by_group["hami-amd"]} == {"amd.com/gpucores", "amd.com/gpumem"}
    # Every static vNPU type Ascend's device plugin names (mind-cluster virtual_instance.md).
    vnpus = {lim.key for lim in ps.by_group["ascend-vnpu"]}
    assert len(vnpus) == 19
    assert {
        "huawei.com/Ascend910-2c",
        "huawei.com/Ascend910-16c",
        "huawei.com/Ascend910-5c.1cpu.16g",
        "huawei.com/Ascend910-10c.4cpu.16g.dvpp",
        "huawei.com/Ascend310P-1c",
        "huawei.com/Ascend310P-2c.1cpu",
        "huawei.com/Ascend310P-4c.3cpu.ndvpp",
    } <= vnpus
    assert {lim.key for lim in ps.by_group["hami-ascend"]} >= {
        "huawei.com/Ascend910B3-memory",
        "huawei.com/Ascend310P-memory",
    }


def test_amd_gpu_is_whole_cards_and_hami_amd_cores_are_percentages() -> None:
    by_key = load_policy_dir(CONFIGMAPS).by_key
    gpu = by_key["amd.com/gpu"]
    assert gpu.requests is RequestsPolicy.FROM_LIMITS and gpu.default is None
    cores = by_key["amd.com/gpucores"]
    assert (cores.min, cores.max) == (1, 100)


@pytest.mark.parametrize(
    ("key", "capacity"),
    [
        ("huawei.com/Ascend910A-memory", 32768),
        ("huawei.com/Ascend910B3-memory", 65536),
        ("huawei.com/Ascend910B4-memory", 32768),
        ("huawei.com/Ascend310P-memory", 24576),
    ],
)
def test_hami_ascend_memory_is_capped_at_the_chips_capacity(key: str, capacity: int) -> None:
    assert load_policy_dir(CONFIGMAPS).by_key[key].max == capacity


def test_one_vnpu_per_container() -> None:
    ps = load_policy_dir(CONFIGMAPS)
    assert {lim.max for lim in ps.by_group["ascend-vnpu"]} == {1}
    assert all(lim.default is None for lim in ps.by_group["ascend-vnpu"])
