"""A read-only cache directory (#15 item 6): the model still loads and answers, the cache
says why it cannot save there (and saves elsewhere), and ``hearth cache ls`` lists what is
on disk with a one-line note — no traceback. The directory is made read-only for real: a
read-only bind mount in a private mount namespace (``unshare``), since root ignores file
permissions."""

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


def can_mount_read_only(tmp: Path) -> bool:
    probe = subprocess.run(
        ["unshare", "-rm", "sh", "-c", f"mount --bind {tmp} {tmp} && mount -o remount,ro,bind {tmp}"],
        capture_output=True,
    )
    return shutil.which("unshare") is not None and probe.returncode == 0


def test_a_read_only_cache_dir_costs_the_cache_not_the_model(tmp_path: Path, tiny_model_path: Path) -> None:
    if not can_mount_read_only(tmp_path):
        pytest.skip("this machine allows no user namespace, so no read-only mount can be made")
    data = tmp_path / "data"
    with CacheStore(data / "cache", ram_file_dir=tmp_path / "shm") as store:  # an existing cache
        tokens = list(range(40))
        store.submit_save(model_id="old", meta=META, tokens=tokens, payload=state_for(tokens),
                          reason="finish", tier="disk")  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    script = (
        f"mount --bind {data} {data} && mount -o remount,ro,bind {data} && "
        f"{sys.executable} -c '{CHILD}' {data} {tiny_model_path}"
    )
    done = subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=300)  # fmt: skip
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
