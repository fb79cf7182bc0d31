from tensorgauge.sources.fingerprint import host_fingerprint, nvidia_driver_version, tf_relevant_flags


def test_host_fingerprint_has_the_facts_that_explain_tf_speed():
    fp = host_fingerprint(environ={"TF_NUM_INTRAOP_THREADS": "1", "HOME": "/root"})
    assert fp["cores_logical"] >= 1 and fp["cores_allowed"] >= 1 and fp["cpus_allowed"]
    assert fp["ram_bytes"] > 0 and fp["kernel"] and fp["os"] == "Linux"
    assert fp["env_vars"] == {"TF_NUM_INTRAOP_THREADS": "1"}


def test_flags_kept_are_the_ones_tf_cares_about():
    flags = ["fpu", "sse4_2", "avx2", "avx512f", "avx512_vnni", "amx_tile", "fma", "ht"]
    assert tf_relevant_flags(flags) == ["amx_tile", "avx2", "avx512_vnni", "avx512f", "fma", "sse4_2"]


def test_nvidia_driver_version(tmp_path):
    path = tmp_path / "version"
    path.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n"
                    "GCC version:  gcc version 12.2.0\n")
    assert nvidia_driver_version(str(path)) == "550.54.15"
    assert nvidia_driver_version(str(tmp_path / "none")) is None
