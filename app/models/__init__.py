"""Model library, Hugging Face Hub downloads and LoRA adapter checks — no Qt (docs/design.md §5)."""
