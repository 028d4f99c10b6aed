"""One way to say a size and a host everywhere (plan, probe, the OOM rules, memory-growth)."""
from grpo_doctor.schema.human_text import format_bytes, short_host


def test_sizes_are_said_in_the_unit_a_person_reads_them_in():
    assert [format_bytes(n) for n in (79.1 * 2**30, 1.5 * 2**30, 448 * 2**20, 2.5 * 2**20, 896 * 2**10, 512)] == [
        "79.1 GiB", "1.50 GiB", "0.44 GiB", "2.5 MiB", "896.0 KiB", "512 B"]
    assert format_bytes(-1.25 * 2**30) == "-1.25 GiB"  # a negative KV cache keeps its sign


def test_a_host_is_cut_at_its_first_dot_but_an_ip_address_stays_whole():
    assert short_host("gpu-a67.cluster.example") == "gpu-a67"
    assert short_host("10.0.0.1") != short_host("10.0.0.2")
    assert short_host(None) is None
