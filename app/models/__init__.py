"""Model library, Hugging Face Hub downloads and LoRA adapter checks — no Qt (SPEC §5)."""
