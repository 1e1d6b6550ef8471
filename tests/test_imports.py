"""No import cycles among our packages: a module never needs, even indirectly, a module that needs it.

The graph is grimp's (the engine behind import-linter): every import statement of every module of
engine, kernels, gateway, integrations and benchmarks, those inside functions too, since a cycle deferred into a
function is still two concepts that lean on each other."""

import grimp

PACKAGES = ("engine", "kernels", "gateway", "integrations", "benchmarks")

# Cycles that are known and owned elsewhere, each to be removed when its fix lands (a cycle listed
# here that no longer exists fails the test too, so the list only shrinks).
KNOWN: set[frozenset[str]] = set()


def import_cycles(graph: grimp.ImportGraph) -> dict[frozenset[str], tuple[str, ...]]:
    """Every cycle, as its modules -> one route around it: for each import a -> b, the shortest chain
    back from b to a, if any, closes one."""
    cycles: dict[frozenset[str], tuple[str, ...]] = {}
    for importer in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            back = graph.find_shortest_chain(importer=imported, imported=importer)
            if back:
                route = (importer, *back)
                cycles.setdefault(frozenset(route), route)
    return cycles


def test_no_import_cycles():
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    cycles = import_cycles(graph)
    new = [" -> ".join(route) for key, route in sorted(cycles.items(), key=lambda kv: kv[1]) if key not in KNOWN]
    assert not new, "import cycles:\n" + "\n".join(new)
    gone = [sorted(key) for key in KNOWN if key not in cycles]
    assert not gone, f"known cycles that no longer exist; remove them from KNOWN: {gone}"



# One-way boundaries: the text-to-SQL run time answers questions; the kit that generated the adapter's training
# data, trained it and evaluates it builds on the run time, which never needs the kit (nor does any other package:
# `sllm text2sql` mounts the kit's commands by module name, engine/cli.py).
KIT = "integrations.text2sql.training"


def kit_importers(graph: grimp.ImportGraph, kit: str = KIT) -> list[str]:
    """Each import chain from a module outside the kit into it."""
    outside = sorted(m for m in graph.modules if m != kit and not m.startswith(kit + "."))
    inside = sorted(graph.find_descendants(kit) | {kit})
    chains = []
    for module in outside:
        for target in inside:
            chain = graph.find_shortest_chain(importer=module, imported=target)
            if chain:
                chains.append(" -> ".join(chain))
    return chains


def test_the_text2sql_runtime_never_imports_its_training_kit():
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    assert graph.find_children(KIT), "the kit's package is missing"
    chains = kit_importers(graph)
    assert not chains, "imports into the training kit from outside it:\n" + "\n".join(chains)


# The gateway, grouped by concern: the composition root at the top (app, cli, settings, config_file, state, db,
# registry: what the server is built from and holds), routers (HTTP resources) over serving (what each endpoint
# does; gateway/jobs run it too), and below both the plumbing packages: web (HTTP plumbing), limits (limits and
# accounting) and security (tenancy and policies). Each entry: a package (or module) and what it never imports,
# even through other modules.
GATEWAY_BOUNDARIES: dict[str, tuple[str, ...]] = {
    "gateway.serving": ("gateway.routers", "gateway.app", "gateway.cli"),
    "gateway.jobs": ("gateway.routers", "gateway.app", "gateway.cli"),
    "gateway.web": ("gateway.serving", "gateway.jobs", "gateway.routers", "gateway.app", "gateway.cli"),
    "gateway.limits": ("gateway.serving", "gateway.jobs", "gateway.routers", "gateway.app", "gateway.cli"),
    "gateway.security": (
        "gateway.web", "gateway.limits", "gateway.serving", "gateway.jobs", "gateway.routers", "gateway.app",
        "gateway.cli",
    ),
    "gateway.state": ("gateway.serving", "gateway.jobs", "gateway.routers", "gateway.app", "gateway.cli"),
    "gateway.registry": ("gateway.serving", "gateway.jobs", "gateway.routers", "gateway.app", "gateway.cli"),
}


def boundary_crossings(graph: grimp.ImportGraph, boundaries: dict[str, tuple[str, ...]]) -> list[str]:
    """One import chain for each boundary crossed (a package on the left needing one it must not)."""
    crossings = []
    for importer, forbidden in boundaries.items():
        for imported in forbidden:
            chains = graph.find_shortest_chains(importer=importer, imported=imported)
            if chains:
                crossings.append(" -> ".join(min(chains)))
    return crossings


def test_the_gateway_packages_import_one_way():
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    for package in ("gateway.web", "gateway.limits", "gateway.security", "gateway.serving"):
        assert graph.find_children(package), f"{package} is missing"
    crossings = boundary_crossings(graph, GATEWAY_BOUNDARIES)
    assert not crossings, "gateway boundaries crossed:\n" + "\n".join(crossings)
