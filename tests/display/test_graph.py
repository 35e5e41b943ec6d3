"""Dataflow pictures (effir/graph.py): the SVG parses and names every
binding of the functions drawn; `effir graph` draws the examples."""

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import effir
from effir.cli import main
from effir.ir.expr import Function, Let

ROOT = Path(__file__).parents[2]
EXAMPLES = sorted(ROOT.glob("examples/*.effir"))
GOLDEN = sorted(p for p in ROOT.glob("tests/ir/golden/*.effir") if ".canonical" not in p.name)
SVG = "{http://www.w3.org/2000/svg}"


def let_names(fn: Function) -> set[str]:
    """Every let-bound name in ``fn``, closures' bodies included."""
    names, stack = set(), [fn]
    while stack:
        node = stack.pop()
        if isinstance(node, Let):
            names.add("%" + node.var.name_hint)
        stack.extend(node.children())
    return names


def svg_texts(svg: str) -> str:
    tree = ET.fromstring(svg)  # parses: well-formed XML
    assert tree.tag == SVG + "svg"
    return "\n".join("".join(t.itertext()) for t in tree.iter(SVG + "text"))


@pytest.mark.parametrize("path", EXAMPLES + GOLDEN, ids=[p.name for p in EXAMPLES + GOLDEN])
def test_picture_names_every_binding(path: Path):
    module = effir.parse(path.read_text(), source_name=str(path))
    texts = svg_texts(effir.visualize(module).svg)
    for name, fn in module.functions.items():
        assert f"@{name}" in texts
        for binding in let_names(fn):
            assert binding in texts, (name, binding)


def test_state_cells_and_loop_bodies_are_highlighted():
    module = effir.parse((ROOT / "examples/rnn_dropout_bn.effir").read_text())
    tree = ET.fromstring(effir.visualize(module).svg)
    classes = [g.get("class", "") for g in tree.iter(SVG + "g")]
    edges = [p.get("class", "") for p in tree.iter(SVG + "path") if "edge" in p.get("class", "")]
    assert "node cell" in classes and "node state" in classes and "cluster loop" in classes
    assert "edge read" in edges and "edge write" in edges
    texts = svg_texts(effir.visualize(module).svg)
    assert "@rng (new)" in texts and "@bn (new)" in texts


def test_a_function_alone_and_if_regions():
    fn = effir.parse_expr("fn (%c: bool, %x) { if (%c) { let %a = %x * 2f; %a } else { %x } }")
    tree = ET.fromstring(effir.visualize(fn).svg)
    classes = [g.get("class", "") for g in tree.iter(SVG + "g")]
    assert "cluster if" in classes and classes.count("cluster branch") == 2


def test_deep_programs_draw_without_recursion_limit():
    depth = 1000
    text = "fn (%x) { " + "if (True) { " * depth + "%x" + " } else { %x }" * depth + " }"
    svg = effir.visualize(effir.parse_expr(text)).svg
    assert svg.count('class="cluster if"') == depth


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_cli_graph_on_examples(path: Path, tmp_path):
    out = tmp_path / "out.svg"
    assert main(["graph", str(path), "-o", str(out)]) == 0
    module = effir.parse(path.read_text())
    texts = svg_texts(out.read_text())
    assert all(f"@{name}" in texts for name in module.functions)


def test_cli_graph_one_function_to_stdout(capsys):
    path = ROOT / "examples/gru_lm.effir"
    module = effir.parse(path.read_text())
    first = next(iter(module.functions))
    assert main(["graph", str(path), "--function", first]) == 0
    texts = svg_texts(capsys.readouterr().out)
    others = [n for n in module.functions if n != first]
    assert f"@{first}" in texts and not any(f"@{n}\n" in texts + "\n" for n in others)


def test_cli_graph_unknown_function(capsys):
    assert main(["graph", str(ROOT / "examples/gru_lm.effir"), "--function", "nope"]) == 1
    assert "no function @nope" in capsys.readouterr().err
