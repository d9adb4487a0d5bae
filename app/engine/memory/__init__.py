"""Memory before and during a load: what a model needs, what the machine has, the context chosen (``memory_fit``), and Hearth's one budget over all its resident memory (``memory_budget``)."""
