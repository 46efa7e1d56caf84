"""Pure core of the receipt store: canonical JSON, hashing, chain verification, folds.

Nothing here imports Django or touches I/O, a clock or randomness; callers pass them in.
"""
