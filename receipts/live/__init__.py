"""The receipt-wide live feed: what every live view (SSE, long poll) stands on.

One change feed per process (`feed`), woken by one `LISTEN` connection (`listener`) or a
poll on SQLite, publishes receipt positions up to the stable horizon (`horizon`), and a
`follower` per client reads from it by global sequence. It knows streams, not jobs: the
HTTP views that serve it (`jobs.live`) sit above it.
"""
