"""Does the script average its gradients itself: a reduction whose tensor is a `.grad`.

What stands for DDP in a script that wraps no model is a reduction of the gradients
(`dist.all_reduce(p.grad)`, a flat buffer of them, a hook on each parameter), not any
collective: a barrier around a checkpoint, an all_reduce of the loss for logging or of a
gradient *norm* for clipping leave every rank training its own copy. A tensor carries the
gradients when it is a parameter's `.grad`, a view, cast or concatenation of such
tensors, or a name bound to one (assignment, loop, comprehension, a function's parameter
at a call, a gradient hook's argument); a norm, sum or `.item()` of them does not.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable

from safelaunch.lint.scan import Script, dotted

REDUCTIONS = (
    "all_reduce",
    "all_reduce_coalesced",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "all_reduce_multigpu",
)
# methods / functions whose result holds the same gradient values (or some of them)
_SAME_VALUES = frozenset(
    {"view", "view_as", "reshape", "flatten", "contiguous", "detach", "clone", "to", "type"}
    | {"float", "half", "bfloat16", "double", "cuda", "cpu", "div_", "mul_", "div", "mul"}
    | {"squeeze", "unsqueeze", "narrow", "split", "chunk", "unbind", "copy_", "values"}
    | {"cat", "concat", "concatenate", "stack", "_flatten_dense_tensors", "list", "tuple"}
    | {"zip", "enumerate", "reversed", "iter", "chain"}
)
_HOOKS = ("register_hook", "register_post_accumulate_grad_hook")
_ROUNDS = 6  # names pass gradients on through a few bindings at most


def _carries(node: ast.AST | None, grads: set[str]) -> bool:
    """The expression's value holds gradients (see the module's docstring)."""
    if isinstance(node, ast.Attribute):
        return node.attr == "grad" or (node.attr == "data" and _carries(node.value, grads))
    if isinstance(node, ast.Name):
        return node.id in grads
    if isinstance(node, (ast.Subscript, ast.Starred)):
        return _carries(node.value, grads)
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return any(_carries(e, grads) for e in node.elts)
    if isinstance(node, ast.BinOp):  # p.grad / world_size
        return _carries(node.left, grads) or _carries(node.right, grads)
    if isinstance(node, (ast.ListComp, ast.GeneratorExp, ast.SetComp)):
        return _carries(node.elt, grads | _bound_by(node.generators, grads))
    if isinstance(node, ast.DictComp):
        return _carries(node.value, grads | _bound_by(node.generators, grads))
    if isinstance(node, ast.Call):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else dotted(func, {})
        if name.rsplit(".", 1)[-1] not in _SAME_VALUES:
            return False
        receiver = [func.value] if isinstance(func, ast.Attribute) else []
        return any(_carries(a, grads) for a in [*receiver, *node.args])
    return False


def _targets(target: ast.AST) -> Iterable[str]:
    for node in ast.walk(target):
        if isinstance(node, ast.Name):
            yield node.id


def _bound_by(generators: list[ast.comprehension], grads: set[str]) -> set[str]:
    found: set[str] = set()
    for generator in generators:
        if _carries(generator.iter, grads | found):
            found |= set(_targets(generator.target))
    return found


def _functions(script: Script) -> dict[str, list[str]]:
    """Each function the script defines, by name, with its parameters' names."""
    found = {}
    for node in ast.walk(script.tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found[node.name] = [a.arg for a in [*node.args.posonlyargs, *node.args.args]]
    return found


def _hooked(script: Script, functions: dict[str, list[str]]) -> set[str]:
    """The first parameter of every gradient hook (`p.register_hook(fn)`): a gradient."""
    found: set[str] = set()
    for call in script.called(*_HOOKS):
        hook = call.node.args[0] if call.node.args else None
        if isinstance(hook, ast.Lambda) and hook.args.args:
            found.add(hook.args.args[0].arg)
        elif isinstance(hook, ast.Name) and functions.get(hook.id):
            found.add(functions[hook.id][0])
    return found


def gradient_names(script: Script) -> set[str]:
    """Names that hold gradients somewhere in the script (bindings followed to a fixpoint)."""
    functions = _functions(script)
    grads = _hooked(script, functions)
    for _ in range(_ROUNDS):
        before = len(grads)
        for assign in (a for assigns in script.assigns.values() for a in assigns):
            if _carries(assign.value, grads):
                grads |= {n for t in assign.targets for n in _targets(t)}
        for loop in script.loops:
            if _carries(loop.iter, grads):
                grads |= set(_targets(loop.target))
        for call in script.calls:  # sync(grads): sync's own parameter holds them
            params = functions.get(call.last, [])
            grads |= {p for p, a in zip(params, call.node.args, strict=False) if _carries(a, grads)}
        if len(grads) == before:
            break
    return grads


def reduces_gradients(script: Script) -> bool:
    """Some reduction's tensor carries the gradients."""
    reductions = script.called(*REDUCTIONS)
    if not reductions:
        return False
    grads = gradient_names(script)
    return any(
        _carries(arg, grads)
        for call in reductions
        for arg in [*call.node.args, *(k.value for k in call.node.keywords)]
    )
