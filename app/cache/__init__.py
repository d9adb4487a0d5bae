"""The KV cache: keys, policy, KVC blob files, tiers and the store. No Qt here."""
