"""What the machine has (issue 54): ``/proc/meminfo``'s MemAvailable, and the tightest cgroup
memory limit of this process's cgroup and every one above it, v2 and v1 (real files in a
temporary tree laid out as ``/proc/self/cgroup`` and ``/sys/fs/cgroup`` are)."""

from __future__ import annotations

from pathlib import Path

from app.engine.memory.memory_fit import _cgroup_dirs, read_machine

MiB = 1 << 20


def _meminfo(tmp: Path, available_kb: int) -> str:
    path = tmp / "meminfo"
    path.write_text(f"MemTotal:       16000000 kB\nMemFree:          100000 kB\nMemAvailable:   {available_kb} kB\n"
                    "HugePages_Total:       0\n")
    return str(path)


def test_meminfo_alone(tmp_path: Path) -> None:
    m = read_machine(_meminfo(tmp_path, 2_000_000), cgroup_dir=str(tmp_path / "none"))
    assert (m.mem_available, m.mem_total, m.cgroup_limit) == (2_000_000 * 1024, 16_000_000 * 1024, None)
    assert m.available == m.mem_available
    assert m.words() == "1.9 GiB available"


def test_the_tightest_cgroup_above_this_process_counts_v2(tmp_path: Path) -> None:
    root = tmp_path / "sys"
    (root / "user.slice" / "app.scope").mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpu memory\n")
    (root / "user.slice" / "memory.max").write_text(f"{1024 * MiB}\n")
    (root / "user.slice" / "memory.current").write_text(f"{900 * MiB}\n")  # 124 MiB left up here
    (root / "user.slice" / "app.scope" / "memory.max").write_text("max\n")
    proc = tmp_path / "cgroup"
    proc.write_text("0::/user.slice/app.scope\n")
    dirs = _cgroup_dirs(str(proc), str(root))
    assert dirs == [root / "user.slice" / "app.scope", root / "user.slice", root]
    m = read_machine(_meminfo(tmp_path, 4_000_000), proc_cgroup=str(proc), cgroup_root=str(root))
    assert (m.cgroup_limit, m.cgroup_used, m.available) == (1024 * MiB, 900 * MiB, 124 * MiB)


def test_a_v1_memory_cgroup_and_its_unlimited_root(tmp_path: Path) -> None:
    root = tmp_path / "sys"
    (root / "memory" / "docker" / "abc").mkdir(parents=True)
    (root / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712\n")  # v1's "no limit"
    (root / "memory" / "docker" / "abc" / "memory.limit_in_bytes").write_text(f"{512 * MiB}\n")
    (root / "memory" / "docker" / "abc" / "memory.usage_in_bytes").write_text(f"{200 * MiB}\n")
    proc = tmp_path / "cgroup"
    proc.write_text("12:pids:/docker/abc\n4:memory:/docker/abc\n0::/\n")
    dirs = _cgroup_dirs(str(proc), str(root))
    # (the "0::/" line of a hybrid layout: the v2 tree mounted at unified/, no limits there)
    assert dirs == [root / "memory" / "docker" / "abc", root / "memory" / "docker", root / "memory", root / "unified"]
    m = read_machine(_meminfo(tmp_path, 4_000_000), proc_cgroup=str(proc), cgroup_root=str(root))
    assert (m.cgroup_limit, m.cgroup_used) == (512 * MiB, 200 * MiB)
    assert m.available == 312 * MiB
    assert m.words() == "312.0 MiB available (its memory limit is 512.0 MiB, 200.0 MiB used)"
    unlimited = read_machine(_meminfo(tmp_path, 4_000_000), cgroup_dir=str(root / "memory"))
    assert unlimited.cgroup_limit is None and unlimited.available == 4_000_000 * 1024
