import pytest

from tensorgauge.errors import TensorgaugeError
from tensorgauge.monitoring.limits import INTERPRETER_FLOOR_BYTES, make_budget, parse_cpus, parse_memory, thread_pools

GIB = 1 << 30


@pytest.mark.parametrize("text, expected", [
    ("10%", int(24 * GIB * 0.1)), ("4GiB", 4 * GIB), ("4gib", 4 * GIB), ("4G", 4 * 10**9), ("512MiB", 512 << 20),
    ("2.5GB", int(2.5e9)), ("1073741824", GIB), (" 100% ", 24 * GIB),
])
def test_memory_sizes(text, expected):
    assert parse_memory(text, 24 * GIB) == expected


@pytest.mark.parametrize("text, message", [
    ("0", "more than zero"), ("0%", "between 0% and 100%"), ("150%", "between 0% and 100%"),
    ("-1GiB", "is not a size"), ("4XB", "unknown unit 'XB'"), ("lots", "is not a size"), ("", "is not a size"),
])
def test_bad_memory_sizes(text, message):
    with pytest.raises(TensorgaugeError, match=message):
        parse_memory(text, 24 * GIB)


def test_cpus():
    assert parse_cpus("1.5", 2.0) == 1.5
    for text, message in (("0", "at least 0.01"), ("-1", "at least 0.01"), ("3", "more than the 2 CPUs"),
                          ("many", "not a number"), ("nan", "not a finite number"), ("inf", "not a finite number")):
        with pytest.raises(TensorgaugeError, match=message):
            parse_cpus(text, 2.0)


def test_budget_checks_floor_ram_and_gpu_units():
    budget = make_budget("10%", "1", "8GiB", ram_bytes=24 * GIB, cores_allowed=2)
    assert budget.max_memory_bytes == int(2.4 * GIB) and budget.soft_memory_bytes == int(budget.max_memory_bytes * 0.9)
    assert budget.max_cpus == 1.0 and budget.max_gpu_memory_bytes == 8 * GIB and not budget.empty
    with pytest.raises(TensorgaugeError, match="below the 64 MiB the interpreter itself needs"):
        make_budget("10MiB", None, None, ram_bytes=24 * GIB, cores_allowed=2)
    with pytest.raises(TensorgaugeError, match="more than this machine's memory"):
        make_budget("100GiB", None, None, ram_bytes=24 * GIB, cores_allowed=2)
    with pytest.raises(TensorgaugeError, match="give a size"):
        make_budget(None, None, "50%", ram_bytes=24 * GIB, cores_allowed=2)
    assert make_budget(None, None, None, ram_bytes=GIB, cores_allowed=1).empty
    assert INTERPRETER_FLOOR_BYTES == 64 << 20


def test_thread_pools_round_up():
    assert thread_pools(1.5)["TF_NUM_INTRAOP_THREADS"] == "2" and thread_pools(0.5)["OMP_NUM_THREADS"] == "1"


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "-1", "61", "fast", float("nan"), None])
def test_one_interval_check_refuses_what_no_sampler_can_take_for_the_cli_the_api_and_the_magic(value, capsys,
                                                                                              tmp_path):
    from tensorgauge import monitor
    from tensorgauge.cli import main
    from tensorgauge.monitoring.limits import check_interval
    from tensorgauge.notebook import _parse, _parser

    with pytest.raises(TensorgaugeError, match="interval"):
        check_interval(value)
    with pytest.raises(TensorgaugeError, match="interval"):
        monitor(store=str(tmp_path / "runs.db"), interval_seconds=value)
    if isinstance(value, str):
        assert _parse(_parser("%%tensorgauge"), f"--interval {value}") is None  # said, not stored
        assert "interval" in capsys.readouterr().out
        assert main(["run", "--interval", value, "--", "true"]) == 2
    assert not (tmp_path / "runs.db").exists()


def test_an_interval_in_range_is_taken_everywhere():
    from tensorgauge.monitoring.limits import check_interval
    from tensorgauge.notebook import _parse, _parser

    assert check_interval("0.05") == 0.05 and check_interval(60) == 60.0
    assert _parse(_parser("%%tensorgauge"), "--interval 0.5").interval == 0.5


def test_a_cpu_budget_below_what_a_cgroup_quota_takes_is_refused():
    with pytest.raises(TensorgaugeError, match="at least 0.01"):
        parse_cpus("1e-300", 2.0)
