"""A read-only cache directory: the model still loads and answers, the cache says why it
cannot save there (and saves elsewhere), and ``hearth cache ls`` lists what is on disk with a
one-line note — no traceback. The directory is made read-only for real, in ways root cannot
ignore (root ignores file permissions, and CI runs as root): a read-only bind mount in a
private mount namespace (``unshare``), and a Landlock rule set the child process puts on
itself (Linux ≥ 5.13; no privilege needed, and root is bound by it too). Each way skips only
where the kernel or the container allows neither."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from app.cache.keys import KeyMeta
from app.cache.store import CacheStore
from tests.helpers.kv_states import state_for

ROOT = Path(__file__).resolve().parents[3]
META = KeyMeta(b"\x5a" * 32, "q8_0", b"\xa5" * 32)

CHILD = textwrap.dedent(
    """
    import contextlib, io, json, sys
    from app.cache import cli
    from app.cache.policy import CachePolicy
    from app.engine import Engine, ModelConfig

    data, model_path = sys.argv[1], sys.argv[2]
    out = {}
    listing, errors = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(errors):
        out["ls_code"] = cli.cmd_ls(__import__("pathlib").Path(data) / "cache", listing)
    out["ls"], out["ls_err"] = listing.getvalue(), errors.getvalue()
    engine = Engine(data)
    policy = CachePolicy(min_tokens=4, cold_min_tokens=10**6, cold_max_tokens=2 * 10**6)
    model = engine.load_model("m", ModelConfig(path=model_path, n_ctx=256, n_seq_max=2,
                                               n_batch=64, n_threads=1, tier="disk", policy=policy))
    result = model.complete("Hello there, how are you today?", response_tokens=4)
    engine.cache.flush()
    again = model.complete("Hello there, how are you today?", response_tokens=4)
    out["reply"] = result.reply
    out["second_hit"] = again.cache_hit_kind
    out["problems"] = sorted(p.kind for p in engine.cache.problems())
    out["tiers"] = sorted({r.tier for r in engine.cache.rows()})
    engine.close()
    print(json.dumps(out))
    """
)


LANDLOCK = textwrap.dedent(
    """
    import ctypes, os, sys

    def read_only_but(*writable):
        # Landlock: every write-type access is handled, and granted only beneath `writable`.
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        abi = libc.syscall(444, None, ctypes.c_size_t(0), ctypes.c_uint32(1))  # the ABI version
        if abi < 1:
            raise OSError(ctypes.get_errno(), "Landlock is not available")
        write = sum(1 << bit for bit in (1, 4, 5, 6, 7, 8, 9, 10, 11, 12))  # write, remove, make
        write |= (1 << 13 if abi >= 2 else 0) | (1 << 14 if abi >= 3 else 0)  # refer, truncate

        class Ruleset(ctypes.Structure):
            _fields_ = [("handled_access_fs", ctypes.c_uint64)]

        class Beneath(ctypes.Structure):
            _pack_ = 1
            _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]

        ruleset = Ruleset(write)
        fd = libc.syscall(444, ctypes.byref(ruleset), ctypes.c_size_t(ctypes.sizeof(ruleset)), ctypes.c_uint32(0))
        if fd < 0:
            raise OSError(ctypes.get_errno(), "landlock_create_ruleset")
        for path in writable:
            rule = Beneath(write, os.open(path, os.O_PATH))
            if libc.syscall(445, fd, 1, ctypes.byref(rule), ctypes.c_uint32(0)) < 0:
                raise OSError(ctypes.get_errno(), "landlock_add_rule " + path)
        if libc.prctl(38, 1, 0, 0, 0) < 0 or libc.syscall(446, fd, ctypes.c_uint32(0)) < 0:  # no_new_privs
            raise OSError(ctypes.get_errno(), "landlock_restrict_self")

    read_only_but(*sys.argv[3:])
    """
)
"""Run before ``CHILD``: the process (and its children) may write only beneath the paths
given after the data dir and the model, so the data dir is read-only for it, root or not."""


def can_landlock(tmp: Path) -> bool:
    probe = tmp / "landlock-probe"
    probe.mkdir()
    code = LANDLOCK + f"\ntry:\n    open({str(probe / 'x')!r}, 'w')\nexcept PermissionError:\n    sys.exit(0)\nsys.exit(1)\n"
    done = subprocess.run([sys.executable, "-c", code, "", "", "/dev"], capture_output=True, timeout=60)
    return done.returncode == 0


def can_mount_read_only(tmp: Path) -> bool:
    probe = subprocess.run(
        ["unshare", "-rm", "sh", "-c", f"mount --bind {tmp} {tmp} && mount -o remount,ro,bind {tmp}"],
        capture_output=True,
    )
    return shutil.which("unshare") is not None and probe.returncode == 0


@pytest.mark.parametrize("way", ["mount", "landlock"])
def test_a_read_only_cache_dir_costs_the_cache_not_the_model(tmp_path: Path, tiny_model_path: Path, way: str) -> None:
    if way == "mount" and not can_mount_read_only(tmp_path):
        pytest.skip("this machine allows no user namespace, so no read-only mount can be made")
    if way == "landlock" and not can_landlock(tmp_path):
        pytest.skip("this kernel (or its seccomp filter) offers no Landlock")
    data = tmp_path / "data"
    with CacheStore(data / "cache", ram_file_dir=tmp_path / "shm") as store:  # an existing cache
        tokens = list(range(40))
        store.submit_save(model_id="old", meta=META, tokens=tokens, payload=state_for(tokens),
                          reason="finish", tier="disk")  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    if way == "mount":
        script = (
            f"mount --bind {data} {data} && mount -o remount,ro,bind {data} && "
            f"{sys.executable} -c '{CHILD}' {data} {tiny_model_path}"
        )
        command = ["unshare", "-rm", "sh", "-c", script]
    else:  # writable: /dev (its null and shm, where the RAM-file tier goes), nothing else
        command = [sys.executable, "-c", LANDLOCK + CHILD, str(data), str(tiny_model_path), "/dev"]
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["ls_code"] == 0 and out["ls"].splitlines()[-1] == "1 entries"
    assert "note: the cache directory cannot be written" in out["ls_err"]
    assert "Traceback" not in out["ls_err"] + done.stderr
    assert out["reply"]  # the model loaded and answered
    assert "read_only" in out["problems"]
    assert out["tiers"] in (["disk", "ram_file"], ["disk", "ram"])  # the old row, and the new
    assert out["second_hit"] == "exact"  # ...saved where it could go, and found
    assert len(list((data / "cache" / "kv").iterdir())) == 2  # nothing was written there
