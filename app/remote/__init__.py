"""Remote models: an OpenAI-compatible endpoint (llama-server, vLLM, another Hearth) used by
chats like a local model. No Qt; no local KV cache — the remote server keeps its own."""
