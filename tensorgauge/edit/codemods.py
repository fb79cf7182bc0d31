"""The edits ``tensorgauge fix`` makes to a job's source, each on a concrete syntax tree (libcst): every
character it does not change, comments and layout included, stays as it was.

Each edit takes the source text and the line of a call site the hook recorded (``python`` reports a
method call on the line of its name: ``.map(`` in a chain written over several lines), and returns the new
text, or raises :class:`Refused` with the reason when the site is not there or not one call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tensorgauge.errors import TensorgaugeError


class Refused(Exception):
    """An edit that cannot be made safely; the message says why."""


def libcst_module() -> Any:
    try:
        import libcst
    except ImportError as exc:
        raise TensorgaugeError("tensorgauge fix needs libcst: pip install 'tensorgauge[fix]'") from exc
    return libcst


def parse(source: str):
    cst = libcst_module()
    try:
        return cst.metadata.MetadataWrapper(cst.parse_module(source))
    except cst.ParserSyntaxError as exc:
        raise Refused(f"it does not parse as Python ({str(exc).splitlines()[0]})") from exc


def _name_line(call, positions) -> set[int]:
    """The lines a call may be reported on: where it starts, and where its method's name is."""
    cst = libcst_module()
    lines = {positions[call].start.line}
    if isinstance(call.func, cst.Attribute):
        lines.add(positions[call.func.attr].start.line)
    return lines


def called_name(call) -> str | None:
    cst = libcst_module()
    if isinstance(call.func, cst.Attribute):
        return call.func.attr.value
    if isinstance(call.func, cst.Name):
        return call.func.value
    return None


def find_calls(source: str, line: int, names: tuple[str, ...]):
    """(the wrapped module, the calls of a function or method named one of ``names`` reported on ``line``)."""
    cst = libcst_module()
    wrapper, positions = _positioned(source)
    return wrapper, [n for n in positions if isinstance(n, cst.Call) and called_name(n) in names
                     and line in _name_line(n, positions)]


def _positioned(source: str):
    """(the wrapped module, every node's position, in the order of the source)."""
    wrapper = parse(source)
    return wrapper, wrapper.resolve(libcst_module().metadata.PositionProvider)


def one_call(source: str, line: int, names: tuple[str, ...]):
    wrapper, found = find_calls(source, line, names)
    what = " or ".join(f"{n}(...)" for n in names)
    if not found:
        raise Refused(f"no call of {what} on line {line} (the file changed since the run?)")
    if len(found) > 1:
        raise Refused(f"{len(found)} calls of {what} on line {line}: which one made the stage is not known")
    return wrapper, found[0]


def _replace(wrapper, target, make: Callable[[Any], Any]) -> str:
    """The module's code with the node ``target`` replaced by ``make(target)``."""
    cst = libcst_module()

    class Replacer(cst.CSTTransformer):  # type: ignore[name-defined]
        def on_leave(self, original, updated):
            return make(updated) if original is target else updated

    return wrapper.module.visit(Replacer()).code


def keyword(call, name: str):
    return next((a for a in call.args if a.keyword is not None and a.keyword.value == name), None)


def _with_keyword(call, name: str, value: str):
    """``call`` with the keyword argument ``name=value`` set (replaced where given, else added last, in the
    layout of the arguments before it: one per line stays one per line)."""
    cst = libcst_module()
    expression = cst.parse_expression(value)
    given = keyword(call, name)
    if given is not None:
        return call.with_changes(args=[a.with_changes(value=expression) if a is given else a for a in call.args])
    args = list(call.args)
    new = cst.Arg(value=expression, keyword=cst.Name(name),
                  equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                        whitespace_after=cst.SimpleWhitespace("")))
    if not args:
        return call.with_changes(args=[new])
    last = args[-1]
    if isinstance(last.comma, cst.Comma):  # a trailing comma: the new argument takes it, the last one its neighbour's
        between = args[-2].comma if len(args) > 1 and isinstance(args[-2].comma, cst.Comma) else cst.Comma(
            whitespace_after=cst.SimpleWhitespace(" "))
        args[-1] = last.with_changes(comma=between)
        args.append(new.with_changes(comma=last.comma))
    else:
        between = args[-2].comma if len(args) > 1 and isinstance(args[-2].comma, cst.Comma) else cst.Comma(
            whitespace_after=cst.SimpleWhitespace(" "))
        args[-1] = last.with_changes(comma=between)
        args.append(new)
    return call.with_changes(args=args)


def _without_keyword(call, name: str):
    cst = libcst_module()
    args = list(call.args)
    given = keyword(call, name)
    index = args.index(given)
    if index == len(args) - 1 and index > 0:  # the last: its neighbour takes its comma (or none)
        args[index - 1] = args[index - 1].with_changes(comma=given.comma)
    del args[index]
    if not args:
        return call.with_changes(args=[], whitespace_before_args=cst.SimpleWhitespace(""))
    return call.with_changes(args=args)


def set_keyword(source: str, line: int, names: tuple[str, ...], name: str, value: str) -> str:
    """The call on ``line`` with ``name=value`` among its arguments."""
    wrapper, call = one_call(source, line, names)
    given = keyword(call, name)
    if given is not None and code_of(given.value) == value:
        raise Refused(f"it already has {name}={value}")
    return _replace(wrapper, call, lambda node: _with_keyword(node, name, value))


def remove_keyword(source: str, line: int, names: tuple[str, ...], name: str, only: str | None = None) -> str:
    """The call on ``line`` without its ``name=`` argument (only where its value is ``only``, when given)."""
    wrapper, call = one_call(source, line, names)
    given = keyword(call, name)
    if given is None:
        raise Refused(f"the call on line {line} has no {name}= argument")
    if only is not None and code_of(given.value) != only:
        raise Refused(f"its {name}= is {code_of(given.value)}, not {only}: left as the code decides it")
    return _replace(wrapper, call, lambda node: _without_keyword(node, name))


def code_of(node) -> str:
    return libcst_module().Module(body=[]).code_for_node(node)


def chain_after(source: str, line: int, names: tuple[str, ...], method: str, arguments: str = "") -> str:
    """The call on ``line`` followed by ``.method(arguments)`` (``ds.map(f)`` -> ``ds.map(f).cache()``)."""
    cst = libcst_module()
    wrapper, call = one_call(source, line, names)
    added = cst.parse_expression(f"_.{method}({arguments})")

    def chained(node):  # parentheses around the call go around the chain: ``(ds.batch(32).prefetch(...))``
        inner = node.with_changes(lpar=[], rpar=[])
        return added.with_changes(func=added.func.with_changes(value=inner), lpar=node.lpar, rpar=node.rpar)

    return _replace(wrapper, call, chained)


def chain_on_argument(source: str, line: int, names: tuple[str, ...], method: str, arguments: str = "",
                      position: int = 0, keyword_name: str = "x") -> str:
    """The call on ``line`` with its first argument (or ``x=``) followed by ``.method(arguments)``:
    ``model.fit(train_ds, ...)`` -> ``model.fit(train_ds.prefetch(tf.data.AUTOTUNE), ...)``."""
    cst = libcst_module()
    wrapper, call = one_call(source, line, names)
    given = keyword(call, keyword_name) or next((a for i, a in enumerate(call.args) if i == position
                                                 and a.keyword is None and not a.star), None)
    if given is None:
        raise Refused(f"the call on line {line} has no {keyword_name} to add .{method}() to")
    if not isinstance(given.value, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)):
        raise Refused(f"its {keyword_name} is an expression ({code_of(given.value)}): add .{method}() where it is made")
    added = cst.parse_expression(f"_.{method}({arguments})")
    value = added.with_changes(func=added.func.with_changes(value=given.value))
    return _replace(wrapper, given, lambda node: node.with_changes(value=value))


def enclosing_function(source: str, line: int):
    """(the wrapped module, the innermost ``def`` whose body holds ``line``), or Refused where none does."""
    cst = libcst_module()
    wrapper, positions = _positioned(source)
    found = [n for n in positions if isinstance(n, cst.FunctionDef)
             and min([positions[n].start.line, *(positions[d].start.line for d in n.decorators)]) <= line
             <= positions[n].end.line]  # a decorated function's code starts at its first decorator
    if not found:
        raise Refused(f"line {line} is not inside a function: put the training step in one to compile it")
    return wrapper, found[-1]


def decorator_name(decorator) -> str:
    node = decorator.decorator
    return code_of(node.func if isinstance(node, libcst_module().Call) else node)


def decorate(source: str, line: int, decorator: str, same: tuple[str, ...]) -> str:
    """The function whose body holds ``line`` decorated with ``decorator`` (innermost: nearest its ``def``),
    unless it has one of ``same`` already."""
    cst = libcst_module()
    wrapper, function = enclosing_function(source, line)
    present = [decorator_name(d) for d in function.decorators]
    if any(p in same for p in present):
        raise Refused(f"{function.name.value}() is already decorated with {', '.join(present)}")
    added = cst.Decorator(decorator=cst.parse_expression(decorator))
    return _replace(wrapper, function, lambda node: node.with_changes(decorators=[*node.decorators, added]))


def set_decorator_keyword(source: str, line: int, names: tuple[str, ...], name: str, value: str) -> str:
    """The decorator ``names`` of the function holding ``line`` given ``name=value``
    (``@tf.function`` -> ``@tf.function(reduce_retracing=True)``)."""
    cst = libcst_module()
    wrapper, function = enclosing_function(source, line)
    target = next((d for d in function.decorators if decorator_name(d) in names), None)
    if target is None:
        raise Refused(f"{function.name.value}() has no {' or '.join(names)} decorator")
    node = target.decorator
    call = node if isinstance(node, cst.Call) else cst.Call(func=node)
    if keyword(call, name) is not None and code_of(keyword(call, name).value) == value:
        raise Refused(f"its decorator already has {name}={value}")
    return _replace(wrapper, target, lambda d: d.with_changes(decorator=_with_keyword(call, name, value)))


def module_alias(source: str, module: str) -> str | None:
    """The name ``module`` is imported as at the top of ``source`` (``import tensorflow as tf`` -> "tf")."""
    cst = libcst_module()
    tree = cst.parse_module(source)
    for statement in tree.body:
        for small in statement.body if isinstance(statement, cst.SimpleStatementLine) else ():
            if isinstance(small, cst.Import):
                for alias in small.names:
                    if code_of(alias.name) == module:
                        return alias.asname.name.value if alias.asname else module
    return None


def ensure_import(source: str, module: str, alias: str) -> tuple[str, str]:
    """(``source`` importing ``module``, the name it goes by): an ``import module as alias`` added after the
    module's last top-level import where it has none."""
    cst = libcst_module()
    name = module_alias(source, module)
    if name is not None:
        return source, name
    tree = cst.parse_module(source)
    body = list(tree.body)
    imports = [i for i, s in enumerate(body) if isinstance(s, cst.SimpleStatementLine)
               and any(isinstance(x, (cst.Import, cst.ImportFrom)) for x in s.body)]
    statement = cst.parse_statement(f"import {module} as {alias}\n")
    at = imports[-1] + 1 if imports else 0
    body.insert(at, statement)
    return tree.with_changes(body=body).code, alias


def predict_to_call(source: str, line: int) -> str:
    """``model.predict(x, ...)`` on ``line`` -> ``model(x, training=False)``, as a NumPy array as predict returns
    (``np.asarray`` where the file imports NumPy, else ``.numpy()``)."""
    cst = libcst_module()
    wrapper, call = one_call(source, line, ("predict",))
    if not isinstance(call.func, cst.Attribute):
        raise Refused(f"predict on line {line} is not a method call")
    given = keyword(call, "x") or next((a for a in call.args if a.keyword is None and not a.star), None)
    if given is None:
        raise Refused(f"the predict call on line {line} has no input to call the model on")
    model = code_of(call.func.value)
    x = code_of(given.value)
    numpy = module_alias(source, "numpy")
    direct = f"{model}({x}, training=False)"
    text = f"{numpy}.asarray({direct})" if numpy else f"{direct}.numpy()"
    return _replace(wrapper, call, lambda node: cst.parse_expression(text).with_changes(lpar=node.lpar,
                                                                                        rpar=node.rpar))



def first_in_loop(source: str, line: int, statement: str) -> str:
    """``statement`` made the first of the body of the innermost loop holding ``line`` (a model built in a
    loop: ``keras.backend.clear_session()`` before each), unless that body begins with it already."""
    cst = libcst_module()
    wrapper, positions = _positioned(source)
    loops = [n for n in positions if isinstance(n, (cst.For, cst.While))
             and positions[n].start.line <= line <= positions[n].end.line]
    if not loops:
        raise Refused(f"line {line} is in no loop")
    loop = loops[-1]
    added = cst.parse_statement(f"{statement}\n")
    if loop.body.body and code_of(loop.body.body[0].with_changes(leading_lines=[])).strip() == statement:
        raise Refused(f"the loop already begins with {statement}")

    def first(node):
        body = list(node.body.body)
        lines = list(body[0].leading_lines) if body else []
        body[0] = body[0].with_changes(leading_lines=[])
        return node.with_changes(body=node.body.with_changes(body=[added.with_changes(leading_lines=lines),
                                                                   *body]))

    return _replace(wrapper, loop, first)


def remove_call_statement(source: str, line: int, names: tuple[str, ...]) -> str:
    """The statement on ``line`` that is only a call of ``names`` removed (a ``pass`` left where it was a block's
    only statement)."""
    cst = libcst_module()
    wrapper, call = one_call(source, line, names)
    parents = wrapper.resolve(cst.metadata.ParentNodeProvider)
    expression = parents[call]
    statement = parents.get(expression)
    if not isinstance(expression, cst.Expr) or not isinstance(statement, cst.SimpleStatementLine) \
            or len(statement.body) != 1:
        raise Refused(f"the call on line {line} is part of a larger statement: left as it is")
    block = parents[statement]

    def removed(node):  # the block without the statement, its comments and blank lines kept for the next one
        body = list(node.body)
        at = [i for i, b in enumerate(body) if b.deep_equals(statement)][0]
        lines = list(body[at].leading_lines)
        del body[at]
        if at < len(body):
            body[at] = body[at].with_changes(leading_lines=[*lines, *body[at].leading_lines])
        return node.with_changes(body=body or [cst.SimpleStatementLine(body=[cst.Pass()], leading_lines=lines)])

    return _replace(wrapper, block, removed)
