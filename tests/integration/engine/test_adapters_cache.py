"""LoRA adapters change the cache identity: a row saved under one adapter set is never hit
under another (docs/design.md §4, effective fingerprint)."""

from __future__ import annotations

from app.cache.keys import effective_fingerprint, file_sha256
from app.cache.policy import CachePolicy
from app.engine import Engine, ModelConfig

POLICY = CachePolicy(min_tokens=8, cold_min_tokens=10**6, cold_max_tokens=2 * 10**6)


def _kind(model, tokens):
    stats = model.infer(tokens, response_tokens=3).result(timeout=120)
    return stats.cache_hit_kind, stats.cache_delta.read


def test_rows_are_keyed_by_the_adapter_set(tmp_path, tiny_model_path, tiny_lora_path):
    with Engine(tmp_path / "d") as engine:
        model = engine.load_model("m", ModelConfig(
            path=str(tiny_model_path), n_ctx=512, n_seq_max=2, n_batch=256, n_threads=2,
            policy=POLICY, tier="disk",
        ))  # fmt: skip
        base = model.cache_key_meta()["fingerprint"]
        prompt = model.tokenize("A prompt that the cache will remember under one adapter set.")

        model.prefill_only(prompt)
        engine.cache.flush()
        assert _kind(model, prompt) == ("exact", len(prompt))

        handle = model.load_adapter(str(tiny_lora_path))
        lora_sha = file_sha256(tiny_lora_path)
        assert model.cache_key_meta()["fingerprint"] == effective_fingerprint(base, [(lora_sha, 1.0)])
        assert _kind(model, prompt)[0] == "cold"  # the base model's row is not served

        model.prefill_only(prompt)
        engine.cache.flush()
        assert _kind(model, prompt) == ("exact", len(prompt))  # its own row

        model.set_adapter_scale(handle, 0.5)
        assert model.cache_key_meta()["fingerprint"] == effective_fingerprint(base, [(lora_sha, 0.5)])
        assert _kind(model, prompt)[0] == "cold"  # neither the base row nor the scale-1 row

        model.set_adapter_scale(handle, 1.0)
        assert _kind(model, prompt) == ("exact", len(prompt))

        model.unload_adapter(handle)
        model.unload_adapter(handle)  # idempotent
        assert model.cache_key_meta()["fingerprint"] == base
        assert _kind(model, prompt) == ("exact", len(prompt))
        fingerprints = {r.fingerprint for r in engine.cache.rows()}
        assert len(fingerprints) == 3  # base, adapter at 1.0, adapter at 0.5
