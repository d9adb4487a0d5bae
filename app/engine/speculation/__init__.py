"""Speculative decoding (docs/design.md §9), without a draft model or with one: prompt lookup drafts, the acceptance
rule, per-sequence draft lengths, and when a tick's draft rows pay for themselves.

How a draft travels through the two-phase tick (``app.engine.backend``)::

    tick N    decode  the seq's new token t at p, then drafts d1..dk at p+1..p+k, every
                      row with logits (ordinary positions of the seq, in the same ubatch
                      pass as the other seqs' decode rows)
    tick N+1  sample  row i's logits give the token after d_i: d1..dj are accepted while
                      the sampled token equals the next draft (``verify``), and the token
                      sampled at the first mismatch (or after d_k) is the new one
              stream  d1..dj and the new token reach the request one by one, so a stop
                      string, end-of-generation or the length limit cuts there
              decode  the seq's cells after d_j are dropped (``seq_rm``), the new token is
                      pushed at p+1+j, then the next drafts

**Exact.** A verify row is an ordinary position of the sequence, and under Hearth's KV
settings a row's logits do not depend on the rows next to it (the exactness suite), so each
token is sampled from the logits it would have had without speculation. Acceptance samples
each row with the request's own sampler, in order, and keeps a draft only when the sample
equals it: for a deterministic draft d this IS the standard speculative sampling rule (accept
with probability min(1, p(d)/q(d)) = p(d); on a rejection the sample is distributed as the
residual, p without d, renormalised), and it draws exactly one sample per generated token, as
decoding without speculation does. So greedy replies are bit-identical on and off, and a
seeded sampled reply is too (same seed, same draws, same logits).

**Adaptive.** Each sequence keeps decayed evidence of how often its drafts are accepted, as
two per-token rates (``SeqSpec``): the first token of a fresh guess (``acceptance``), and a
token that follows an accepted one (``continuation``: a copy going on). A draft row costs what
``TickCosts`` says a row costs (plus any ubatch it adds), fitted from decode ticks only; the
i-th draft token is worth ``acceptance * continuation**(i - 1)`` tokens, each worth the
tick's time per decode row. ``Speculator.plan`` reserves the rows whose expected
gain is positive, for the sequences whose drafts pay most; a sequence whose drafts do not pay
stops drafting, and tries one draft again once its evidence has decayed.

**A draft model** (``draft_model``), when one is attached and a request names it
(``draft_model=``), proposes that request's drafts instead of prompt lookup. Its proposals
are made for all its seqs at once after ``stream`` (``draft_with_model``) and ride in the
same decode as lookup drafts; a draft row then also costs the draft model's pass
(``DraftModel.token_ms``), which is kept out of the target's cost fit.

Where: ``lookup`` (prompt lookup, ``verify``, ``SeqSpec``), ``speculator`` (``Speculator``:
the tick's draft rows), ``tick_costs`` (what a tick's shape costs, fitted online),
``draft_model`` (a draft model's proposals, its own backend and seqs).
"""
