"""Pure core of the receipt store: canonical JSON, hashing, the sealed text, chain
verification, folds, and which text a database can store.

Nothing here imports Django or touches I/O, a clock or randomness; callers pass them in.
"""
