"""The package's import graph: layers import only layers below them, no cycles,
no renderer below rendering, and no command imports another."""

import ast
from pathlib import Path

import tensorgauge

ROOT = Path(tensorgauge.__file__).parent
# Lowest first. A module may import its own layer and the layers before it.
LAYERS = [
    ("hook",),  # in the job: the standard library and itself only
    ("scenarios", "bench"),  # jobs run as child processes: they import the hook at most
    ("_version", "errors", "own_process", "redaction", "units", "model", "checks", "series", "steps",
     "stage_shares"),
    ("sources",),
    ("store",),
    ("monitoring",),
    ("analyse",),
    ("edit",),  # tensorgauge fix: the patches, from the analysis and the job's sources
    ("render", "live"),
    ("commands",),
    ("cli", "__main__", "api", "keras", "notebook", "testing", "pytest_plugin", "__init__"),
]
RANK = {name: i for i, names in enumerate(LAYERS) for name in names}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path) -> list[str]:
    """Every tensorgauge module ``path`` imports, at the top or inside a function."""
    tree = ast.parse(path.read_text())
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] == "tensorgauge"]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            if base.split(".")[0] != "tensorgauge":
                continue
            for alias in node.names:  # `from tensorgauge.hook import budget` imports a module
                candidate = f"{base}.{alias.name}"
                found.append(candidate if _exists(candidate) else base)
    return found


def _exists(name: str) -> bool:
    relative = Path(*name.split(".")[1:])
    return (ROOT / relative).with_suffix(".py").is_file() or (ROOT / relative / "__init__.py").is_file()


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def graph() -> dict[str, set[str]]:
    return {module_name(p): set(imports(p)) - {module_name(p)}
            for p in ROOT.rglob("*.py") if "_site" not in p.parts}


def test_every_module_has_a_layer():
    assert {layer(m) for m in graph()} <= set(RANK)


def test_each_layer_imports_only_itself_and_layers_below():
    upward = [(m, i) for m, targets in graph().items() for i in targets
              if i != "tensorgauge" and RANK[layer(i)] > RANK[layer(m)]]
    assert upward == []


def test_the_hook_imports_only_the_hook():
    outside = [(m, i) for m, targets in graph().items() if layer(m) == "hook"
               for i in targets if layer(i) != "hook" and i != "tensorgauge"]
    assert outside == []


def test_store_bundle_and_analysis_import_no_renderer_and_no_command_imports_another():
    g = graph()
    assert [(m, i) for m, t in g.items() if layer(m) in ("store", "analyse") for i in t
            if layer(i) in ("render", "live", "commands")] == []
    commands = [(m, i) for m, t in g.items() if layer(m) == "commands" for i in t
                if layer(i) == "commands" and i.rpartition(".")[2][0] != "_" and i != "tensorgauge.commands"]
    assert commands == []


def test_no_import_cycles():
    g = graph()
    state: dict[str, int] = {}
    cycles = []

    def visit(node, path):
        state[node] = 1
        for nxt in sorted(g.get(node, ())):
            if nxt not in g:
                continue
            if state.get(nxt) == 1:
                cycles.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for node in sorted(g):
        if node not in state:
            visit(node, [node])
    assert cycles == []


# What code outside the hook may import of it: the hook's entry (install, the Keras callback), the event
# formats and environment names, the channel, the phase agent, and the facts read alike on both sides.
# None of them registers a listener: importing a feature module (placement, fixes, budget, ...) would
# register its @on_fit listeners in whatever process imports it, the monitor's included.
HOOK_SHARED = {"tensorgauge.hook", "tensorgauge.hook.protocol", "tensorgauge.hook.channel",
               "tensorgauge.hook.agent", "tensorgauge.hook.facts"}


def test_outside_the_hook_only_its_shared_modules_are_imported():
    g = graph()
    features = [(m, i) for m, targets in g.items() if layer(m) != "hook" for i in targets
                if layer(i) == "hook" and i not in HOOK_SHARED]
    assert features == []


def test_the_hooks_shared_modules_import_no_feature_module_at_import_time():
    """At the top of the module, that is: the entry imports the rest inside ``install()``."""
    for name in HOOK_SHARED:
        path = ROOT / Path(*name.split(".")[1:])
        path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
        tree = ast.parse(path.read_text())
        top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
        imported = {n.module for n in top if isinstance(n, ast.ImportFrom) and n.module} | \
                   {a.name for n in top if isinstance(n, ast.Import) for a in n.names}
        hook = {i for i in imported if i.startswith("tensorgauge.hook")}
        assert hook <= HOOK_SHARED, (name, hook - HOOK_SHARED)
