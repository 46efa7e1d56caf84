"""The lint step's import checks find what they promise: scripts/check_cycles names every
cycle (a lazy import counts as an edge), and passes an acyclic graph."""

from __future__ import annotations

from importlib.machinery import SourceFileLoader
from importlib.util import module_from_spec, spec_from_loader
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]


def _check_cycles():
    loader = SourceFileLoader("check_cycles", str(ROOT / "scripts" / "check_cycles"))
    spec = spec_from_loader("check_cycles", loader)
    assert spec is not None
    module = module_from_spec(spec)
    loader.exec_module(module)
    return module


def graph_of(edges: list[tuple[str, str]]) -> grimp.ImportGraph:
    graph = grimp.ImportGraph()
    for importer, imported in edges:
        graph.add_module(importer)
        graph.add_module(imported)
        graph.add_import(importer=importer, imported=imported)
    return graph


def test_every_cycle_is_found_with_its_members():
    edges = [
        ("p.a", "p.b"),
        ("p.b", "p.c"),
        ("p.c", "p.a"),  # a three-module cycle
        ("p.c", "p.d"),
        ("p.x", "p.y"),
        ("p.y", "p.x"),  # and a separate pair
        ("p.d", "p.e"),
    ]
    assert _check_cycles().cycles(graph_of(edges)) == [["p.a", "p.b", "p.c"], ["p.x", "p.y"]]


def test_an_acyclic_graph_has_no_cycle():
    edges = [("p.a", "p.b"), ("p.b", "p.c"), ("p.a", "p.c"), ("p.d", "p.c")]
    assert _check_cycles().cycles(graph_of(edges)) == []
