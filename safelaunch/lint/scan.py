"""What the rules look at: a training script parsed once, its calls named through its imports.

Static only (Python's ast): the script is never imported or run, so linting costs no
torch import and no side effect. Names are resolved through the script's own import
aliases (`import torch.distributed as dist`, `from torch.nn.parallel import
DistributedDataParallel as DDP`), so rules match on what is called, not how it is spelt.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field

Scope = ast.AST  # the function (or the module) a node belongs to


@dataclass(frozen=True, slots=True)
class Call:
    """One call in the script: its node, dotted name, and the function it sits in."""

    node: ast.Call
    name: str  # e.g. "torch.distributed.init_process_group", "model.cuda", "?.to"
    scope: Scope
    last: str = ""  # the name's last component: "init_process_group", "cuda", "to"

    def __post_init__(self) -> None:
        object.__setattr__(self, "last", self.name.rsplit(".", 1)[-1])

    def keyword(self, name: str) -> ast.expr | None:
        return next((k.value for k in self.node.keywords if k.arg == name), None)


@dataclass
class Script:
    """The parsed script and the facts every rule shares."""

    tree: ast.Module
    aliases: dict[str, str] = field(default_factory=dict)
    calls: list[Call] = field(default_factory=list)
    by_last: dict[str, list[Call]] = field(default_factory=dict)  # see called()
    parents: dict[ast.AST, ast.AST] = field(default_factory=dict)
    imports: set[str] = field(default_factory=set)
    strings: set[str] = field(default_factory=set)  # every string constant
    attributes: set[str] = field(default_factory=set)  # every `.name` accessed
    names: set[str] = field(default_factory=set)  # every identifier used
    assigns: dict[int, list[ast.Assign]] = field(default_factory=dict)  # by id(scope), in order
    uses: dict[str, list[ast.Name]] = field(default_factory=dict)  # every Name node, by id
    loops: list[ast.For] = field(default_factory=list)
    taint: dict[int, list[tuple[int, str, bool]]] = field(default_factory=dict)  # see _tainted

    def called(self, *lasts: str) -> list[Call]:
        """Calls whose last name component is one of `lasts`, in source order."""
        if not self.by_last:
            for call in self.calls:
                self.by_last.setdefault(call.last, []).append(call)
        found = [call for last in lasts for call in self.by_last.get(last, ())]
        return (
            sorted(found, key=lambda c: (c.node.lineno, c.node.col_offset))
            if len(lasts) > 1
            else found
        )

    def imports_any(self, *prefixes: str) -> bool:
        return any(
            module == prefix or module.startswith(prefix + ".")
            for module in self.imports
            for prefix in prefixes
        )

    def ancestors(self, node: ast.AST) -> Iterator[ast.AST]:
        while node in self.parents:
            node = self.parents[node]
            yield node

    def scope_of(self, node: ast.AST) -> Scope:
        for parent in self.ancestors(node):
            if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return parent
        return self.tree

    @property
    def distributed(self) -> bool:
        """It starts a process group or wraps a model for data parallelism."""
        return bool(self.called("init_process_group") or self.wrapped())

    def wrapped(self) -> list[Call]:
        return self.called(*WRAPPERS)


WRAPPERS = (
    "DistributedDataParallel",
    "FullyShardedDataParallel",
    "fully_shard",
    "parallelize_module",
)


def dotted(node: ast.expr, aliases: dict[str, str]) -> str:
    """`dist.init_process_group` -> `torch.distributed.init_process_group`; `?` for the unknown."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(aliases.get(node.id, node.id))
    elif isinstance(node, ast.Call):  # `Model().to(...)`: the call's own name
        parts.append(dotted(node.func, aliases))
    else:
        parts.append("?")
    return ".".join(reversed(parts))


# Fields that never hold a node worth visiting: strings, flags, and the shared singleton
# ctx/operator nodes (ast.Load(), ast.Add() ...) that are a third of a tree's nodes.
# ("name" is not one: 3.12's `type X = ...` keeps a Name node there.)
_LEAF_FIELDS = frozenset(
    {"ctx", "op", "ops", "id", "attr", "arg", "asname", "module", "level", "kind"}
    | {"type_comment", "conversion", "is_async", "simple"}
)
_CHILD_FIELDS: dict[type[ast.AST], tuple[str, ...]] = {ast.Constant: ()}


def _child_fields(kind: type[ast.AST]) -> tuple[str, ...]:
    fields = _CHILD_FIELDS.get(kind)
    if fields is None:
        fields = tuple(f for f in kind._fields if f not in _LEAF_FIELDS)
        _CHILD_FIELDS[kind] = fields
    return fields


def children(node: ast.AST) -> list[ast.AST]:
    """ast.iter_child_nodes without the ctx/operator singletons, as a list (much cheaper)."""
    found: list[ast.AST] = []
    for name in _child_fields(type(node)):
        value = getattr(node, name, None)
        if type(value) is list:
            found += [item for item in value if isinstance(item, ast.AST)]
        elif isinstance(value, ast.AST):
            found.append(value)
    return found


def walk(node: ast.AST) -> Iterator[ast.AST]:
    """Every node under `node` (itself included), in no particular order; see children()."""
    stack = [node]
    while stack:
        node = stack.pop()
        yield node
        stack += children(node)


_INDEXED = frozenset(
    {ast.Call, ast.Name, ast.Attribute, ast.Constant, ast.Assign, ast.For, ast.Import}
    | {ast.ImportFrom}
)


def parse(source: str | bytes, filename: str = "<script>") -> Script:
    """Parse and index the script (SyntaxError propagates: the caller says so)."""
    tree = ast.parse(source, filename=filename)
    script = Script(tree=tree)
    calls: list[tuple[ast.Call, Scope]] = []
    parents = script.parents
    stack: list[tuple[ast.AST, Scope]] = [(tree, tree)]
    # One pass over the tree for parents, scopes, and everything the rules ask about, so
    # that no rule walks the whole tree again: the lint runs at every launch of new content.
    while stack:
        node, scope = stack.pop()
        kind = type(node)
        inner = node if kind is ast.FunctionDef or kind is ast.AsyncFunctionDef else scope
        fields = _CHILD_FIELDS.get(kind)
        for name in _child_fields(kind) if fields is None else fields:  # children(), inlined
            value = getattr(node, name, None)
            if type(value) is list:
                for item in value:
                    if isinstance(item, ast.AST):
                        parents[item] = node
                        stack.append((item, inner))
            elif isinstance(value, ast.AST):
                parents[value] = node
                stack.append((value, inner))
        if kind not in _INDEXED:
            continue  # most nodes: only their children matter
        if isinstance(node, ast.Call):
            calls.append((node, scope))
        elif isinstance(node, ast.Name):
            script.names.add(node.id)
            script.uses.setdefault(node.id, []).append(node)
        elif isinstance(node, ast.Attribute):
            script.attributes.add(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            script.strings.add(node.value)
        elif isinstance(node, ast.Assign):
            script.assigns.setdefault(id(scope), []).append(node)
        elif isinstance(node, ast.For):
            script.loops.append(node)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            _add_import(script, node)
    # aliases first, then calls: a name may be imported below its first use in the file
    script.calls = [Call(node=n, name=dotted(n.func, script.aliases), scope=s) for n, s in calls]
    script.calls.sort(key=lambda c: (c.node.lineno, c.node.col_offset))
    for assigns in script.assigns.values():
        assigns.sort(key=lambda node: node.lineno)
    script.loops.sort(key=lambda node: (node.lineno, node.col_offset))
    return script


def _add_import(script: Script, node: ast.Import | ast.ImportFrom) -> None:
    if isinstance(node, ast.Import):
        for alias in node.names:
            script.imports.add(alias.name)
            local = alias.asname or alias.name.split(".", 1)[0]
            script.aliases[local] = alias.name if alias.asname else local
    elif node.module and not node.level:
        script.imports.add(node.module)
        for alias in node.names:
            script.aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"


def names_in(node: ast.AST) -> Iterator[str]:
    """Identifiers and attribute names in an expression (`args.local_rank` gives both)."""
    for sub in walk(node):
        if isinstance(sub, ast.Name):
            yield sub.id
        elif isinstance(sub, ast.Attribute):
            yield sub.attr


def _rankish(node: ast.AST) -> bool:
    return any("rank" in name.lower() for name in names_in(node))


def _int_constants(node: ast.expr) -> list[int]:
    items = node.elts if isinstance(node, (ast.List, ast.Tuple, ast.Set)) else [node]
    values = []
    for item in items:
        if isinstance(item, ast.UnaryOp) and isinstance(item.op, ast.USub):
            item = item.operand
            if isinstance(item, ast.Constant) and isinstance(item.value, int):
                values.append(-item.value)
        elif isinstance(item, ast.Constant) and type(item.value) is int:
            values.append(item.value)
    return values


MAIN_PROCESS = ("is_main", "is_master", "main_process", "master_process", "rank_zero", "rank0")


def rank_condition(test: ast.expr) -> bool:
    """`rank == 0`, `dist.get_rank() != 0`, `is_main_process()`, `local_rank in (0,)` ...

    A comparison with -1 alone (`local_rank != -1`: "is this run distributed") is not one.
    """
    for node in walk(test):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            constants = [v for side in sides for v in _int_constants(side)]
            if any(v != -1 for v in constants) and any(_rankish(side) for side in sides):
                return True
        if isinstance(node, (ast.Name, ast.Attribute)):
            name = node.id if isinstance(node, ast.Name) else node.attr
            if any(word in name.lower() for word in MAIN_PROCESS):
                return True
    return False


def under_rank_condition(script: Script, node: ast.AST) -> ast.If | None:
    """The innermost `if` on the rank that `node` sits in (either branch), if any."""
    child = node
    for parent in script.ancestors(node):
        if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return None
        if isinstance(parent, ast.If) and child is not parent.test and rank_condition(parent.test):
            return parent
        child = parent
    return None


def _is_rank_name(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and node.value == "RANK"


def _reads_rank(node: ast.AST) -> bool:
    """os.environ["RANK"], os.getenv("RANK"), os.environ.get("RANK"), get_rank()."""
    if isinstance(node, ast.Subscript):
        return _is_rank_name(node.slice)
    if isinstance(node, ast.Call):
        name = dotted(node.func, {})
        first = node.args[0] if node.args else None
        if name.endswith(("getenv", "environ.get")) and _is_rank_name(first):
            return True
        return name.endswith("get_rank") and not node.args
    return False


def _rank_facts(node: ast.AST) -> tuple[bool, bool, set[str]]:
    """(a `%` in it, it reads the global rank, the names it uses): one walk for all three."""
    modulo = reads = False
    names: set[str] = set()
    for sub in walk(node):
        if isinstance(sub, ast.Name):
            names.add(sub.id)
        elif isinstance(sub, ast.BinOp) and isinstance(sub.op, ast.Mod):
            modulo = True
        elif not reads:
            reads = _reads_rank(sub)
    return modulo, reads, names


def global_rank(script: Script, expr: ast.AST, scope: Scope) -> bool:
    """The expression is the global RANK (os.environ["RANK"], get_rank(), a name set from one).

    `rank % torch.cuda.device_count()` is not: that maps a global rank onto this node's GPUs.
    """
    modulo, reads, names = _rank_facts(expr)
    if modulo:
        return False
    if reads:
        return True
    return not names.isdisjoint(_tainted(script, scope, getattr(expr, "lineno", 0)))


def _tainted(script: Script, scope: Scope, before: int) -> set[str]:
    """Names the scope set from the global rank above line `before` (last assignment wins)."""
    events = script.taint.get(id(scope))
    if events is None:  # once per scope: each assignment, in order, judged with those above
        events, running = [], set[str]()
        for node in script.assigns.get(id(scope), ()):
            modulo, reads, names = _rank_facts(node.value)
            is_global = not modulo and (reads or not names.isdisjoint(running))
            for target in node.targets:
                if isinstance(target, ast.Name):
                    (running.add if is_global else running.discard)(target.id)
                    events.append((node.lineno, target.id, is_global))
        script.taint[id(scope)] = events
    tainted: set[str] = set()
    for line, name, is_global in events:
        if line < before:
            (tainted.add if is_global else tainted.discard)(name)
    return tainted
