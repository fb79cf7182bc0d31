"""A custom loop's eager training step compiled with ``tf.function``, on the syntax tree (libcst).

Where the loop calls a function that holds the step (its ``tape.gradient``), that function is decorated.
Where the step is written inside the loop, its statements (from ``with tf.GradientTape()`` to the
optimizer's apply) move into ``@tf.function def train_step(...)``, defined before the loop in the same
scope: it takes the names the loops around it bind and it reads, and returns the names it binds that
code outside it reads; the loop calls it in their place. Comments move with their statements.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tensorgauge.edit.codemods import Refused, code_of, decorate, libcst_module, parse

STEP_NAME = "train_step"
APPLIES = (".apply(", ".apply_gradients(", ".minimize(")


@dataclass
class _Step:
    """Where the step is: the loop body holding it, its statements' range, the scope it moves to."""

    block: Any  # the loop's IndentedBlock
    start: int
    end: int  # the step is block.body[start:end + 1]
    outer: Any  # the outermost loop of the scope: the function goes before it
    loops: list  # the loops of the scope around the step, innermost first
    top_level: bool  # the scope is the module (else a function's body)


def compile_step(source: str, line: int, tf: str = "tf") -> str:
    """The eager training step whose ``tape.gradient`` is on ``line``, compiled (see the module's text)."""
    cst = libcst_module()
    wrapper = parse(source)
    step = _locate(wrapper, line)
    if step is None:
        return decorate(source, line, f"{tf}.function", (f"{tf}.function",))
    contexts = wrapper.resolve(cst.metadata.ExpressionContextProvider)
    taken = step.block.body[step.start:step.end + 1]
    params, outputs = _interface(taken, step.loops, contexts)
    used = {n.value for n in _walk(wrapper.module) if isinstance(n, cst.Name)}
    name = next(n for n in [STEP_NAME, *(f"{STEP_NAME}_{i}" for i in range(1, 99))] if n not in used)
    body = list(taken) + ([cst.parse_statement(f"return {', '.join(outputs)}\n")] if outputs else [])
    function = cst.FunctionDef(name=cst.Name(name), params=cst.Parameters(params=[cst.Param(cst.Name(p))
                                                                                  for p in params]),
                               body=cst.IndentedBlock(body=body),
                               decorators=[cst.Decorator(decorator=cst.parse_expression(f"{tf}.function"))])
    call = f"{name}({', '.join(params)})"
    replacement = cst.parse_statement(f"{', '.join(outputs)} = {call}\n" if outputs else f"{call}\n")
    return _moved(wrapper, step, function, replacement)


def _locate(wrapper, line: int) -> _Step | None:
    """The step inside a loop (None where a function of its own holds it: that one is decorated)."""
    cst = libcst_module()
    positions = wrapper.resolve(cst.metadata.PositionProvider)
    parents = wrapper.resolve(cst.metadata.ParentNodeProvider)
    statements = [n for n in positions if isinstance(n, cst.SimpleStatementLine)
                  and positions[n].start.line <= line <= positions[n].end.line]
    if not statements:
        raise Refused(f"no statement on line {line} (the file changed since the run?)")
    chain, node = [], statements[-1]
    while node in parents:
        node = parents[node]
        chain.append(node)
    loop = next((n for n in chain if isinstance(n, (cst.For, cst.While))), None)
    function = next((n for n in chain if isinstance(n, cst.FunctionDef)), None)
    if function is not None and (loop is None or chain.index(function) < chain.index(loop)):
        return None
    if loop is None:
        raise Refused(f"line {line} is in no loop and no function: put the training step in a function")
    block = loop.body
    child = next(n for n in [statements[-1], *chain] if n in block.body)
    at = block.body.index(child)
    start = next((i for i in range(at, -1, -1) if isinstance(block.body[i], cst.With)
                  and "GradientTape" in code_of(block.body[i].items[0].item)), at)
    end = next((i for i in range(at, min(at + 4, len(block.body)))
                if any(a in code_of(block.body[i]) for a in APPLIES)), at)
    scope = chain[: chain.index(function)] if function is not None else chain
    loops = [n for n in scope if isinstance(n, (cst.For, cst.While))]
    return _Step(block, start, end, loops[-1], loops, function is None)


def _interface(taken: list, loops: list, contexts) -> tuple[list[str], list[str]]:
    """(the parameters: names the loops bind outside the step that it reads; the results: names it binds
    that code outside it reads; ``tape`` stays inside)."""
    cst = libcst_module()
    load, store = cst.metadata.ExpressionContext.LOAD, cst.metadata.ExpressionContext.STORE
    inside = {id(n) for s in taken for n in _walk(s)}
    varying = {n.value for each in loops for n in _walk(each)
               if isinstance(n, cst.Name) and id(n) not in inside and contexts.get(n) == store}
    params = [n for n in _names(taken, contexts, load) if n in varying]
    read_elsewhere = {n.value for n, c in contexts.items() if isinstance(n, cst.Name) and id(n) not in inside
                      and c == load}
    outputs = [n for n in _names(taken, contexts, store) if n in read_elsewhere and n != "tape"]
    return params, outputs


def _moved(wrapper, step: _Step, function, replacement) -> str:
    """The module with the step's statements replaced by its call, and ``function`` before the outer loop."""
    cst = libcst_module()
    blank = [cst.EmptyLine(indent=False)] * (2 if step.top_level else 1)

    class Move(cst.CSTTransformer):  # type: ignore[name-defined]  # libcst is imported when an edit is made
        def leave_IndentedBlock(self, original, updated):
            if original is step.block:
                updated = updated.with_changes(body=[*updated.body[:step.start], replacement,
                                                     *updated.body[step.end + 1:]])
            if not step.top_level and step.outer in original.body:
                return updated.with_changes(body=_insert_before(updated.body, original.body.index(step.outer),
                                                                function, blank))
            return updated

        def leave_Module(self, original, updated):
            if step.top_level and step.outer in original.body:
                return updated.with_changes(body=_insert_before(updated.body, original.body.index(step.outer),
                                                                function, blank))
            return updated

    return wrapper.module.visit(Move()).code


def _insert_before(body, index: int, step, blank) -> list:
    """``body`` with ``step`` before its statement ``index``, that statement then after ``blank`` lines."""
    following = body[index]
    lines = list(following.leading_lines)
    empty = next((i for i, line in enumerate(lines) if line.comment is not None), len(lines))
    lines = [*blank[: max(0, len(blank) - empty)], *lines]  # as many blank lines above as PEP 8 asks, comments kept
    return [*body[:index], step.with_changes(leading_lines=lines),
            following.with_changes(leading_lines=list(blank)), *body[index + 1:]]


def _walk(node):
    yield node
    for child in node.children:
        yield from _walk(child)


def _names(nodes, contexts, context) -> list[str]:
    """The names used in ``nodes`` in ``context`` (load or store), in order, once each."""
    cst = libcst_module()
    found = [n.value for node in nodes for n in _walk(node) if isinstance(n, cst.Name) and contexts.get(n) == context]
    return list(dict.fromkeys(found))
