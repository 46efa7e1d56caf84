"""Deterministic simulation of the delivery runtime (C-2): `manage.py simulate`.

`run.simulate(seed, steps, jobs)` drives the real queue, dispatch, driver, recovery and
promise modules with a virtual clock (`clock`), a simulated broker and worker processes
(`world`, `worker`) and seeded actions (`actions`), checking `invariants` after every
step.
"""
