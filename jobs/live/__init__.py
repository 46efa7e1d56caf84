"""Live events (SPEC 10, A-6, A-7): SSE streams, the long poll and the invalidation callback.

The HTTP side only: every client follows the process's one change feed, which lives in
`receipts.live` because it knows receipts by global sequence and nothing of jobs.
"""
