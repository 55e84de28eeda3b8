"""The SQL92 parser and evaluator against RocketMQ 4.9.8's own test vectors (ported as data) and the semantics read
from its expression classes (three-valued logic, literal-typed conversions, parse-time checks)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pyrmq.plugins.sql92 import Sql92SyntaxError, compile_sql92

HERE = Path(__file__).parent
JAVA = json.loads((HERE / "java_vectors.json").read_text())
SEMANTICS = json.loads((HERE / "semantics.json").read_text())


def _text(expression):
    if isinstance(expression, str):
        return expression
    return expression["template"].replace("{r}", expression["repeat"] * expression["times"])


@pytest.mark.parametrize("case", JAVA["parse_valid"], ids=lambda c: c["expression"])
def test_java_accepts(case):
    assert compile_sql92(case["expression"]).text == case["expression"]


@pytest.mark.parametrize("case", JAVA["parse_invalid"], ids=lambda c: c["source"])
def test_java_rejects(case):
    with pytest.raises(Sql92SyntaxError):
        compile_sql92(_text(case["expression"]))


@pytest.mark.parametrize("case", JAVA["same_tree"], ids=lambda c: c["right"])
def test_java_tree_equality(case):
    left, right = compile_sql92(case["left"]), compile_sql92(case["right"])
    assert (left.canonical == right.canonical) is case["equal"]


@pytest.mark.parametrize("case", JAVA["evaluate"], ids=lambda c: f"{c['expression']}|{c['properties']}")
def test_java_evaluations(case):
    expression = compile_sql92(case["expression"])
    assert expression.matches(case["properties"]) is case["matches"]
    if case.get("java_throws"):
        assert expression.evaluate(case["properties"]) == "error"


@pytest.mark.parametrize("case", SEMANTICS["evaluate"], ids=lambda c: c["why"])
def test_three_valued_semantics(case):
    expression = compile_sql92(case["expression"])
    assert expression.evaluate(case["properties"]) == case["result"]
    assert expression.matches(case["properties"]) is (case["result"] is True)


@pytest.mark.parametrize("case", SEMANTICS["parse_invalid"], ids=lambda c: c["why"])
def test_errors_name_the_position(case):
    with pytest.raises(Sql92SyntaxError) as info:
        compile_sql92(case["expression"])
    error = info.value
    assert (error.line, error.column) == (case.get("line", 1), case["column"])
    assert f"line {error.line}, column {error.column}" in str(error)
