"""Live events (SPEC 10, A-6, A-7): SSE streams, the long poll and the invalidation callback.

One shared change feed per process (`feed`) wakes every client; clients read only what the
feed proved final (`horizon`), so a resume by global sequence never loses a receipt.
"""
