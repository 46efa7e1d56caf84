"""Pure core of the jobs app: vocabulary, job state, fold and wire form, contracts, timing.

Nothing here imports Django or touches I/O, a clock or randomness: time arrives as
receipt timestamps or ``now_ms`` arguments, and settings arrive as values. The shell
(``jobs/queue.py``, ``jobs/runtime/``) does the I/O and calls into these modules.
"""
