"""YAML read with its expansion bounded before anything is built.

Aliases share nodes, so a few hundred bytes (`a: &a [...]`, `b: &b [*a, *a, ...]`, nine levels deep, or merge keys
`<<: *a`) stand for billions of values once a consumer walks or copies them: the pre-flight's key-by-key diff
took 5 GB and two minutes on one such reference config. The document is composed into its node graph first
(cheap: aliases are references), the graph's expanded size is counted with each shared node counted once per
use (memoised), and only a document that expands to at most MAX_EXPANDED_NODES is constructed.
"""

from __future__ import annotations

from typing import Any

MAX_EXPANDED_NODES = 200_000  # a real training config has hundreds of values; a big sweep file thousands


class YamlTooLargeError(ValueError):
    """The document expands beyond the bound (an alias bomb, or a recursive alias)."""


def safe_load_bounded(text: str, max_nodes: int = MAX_EXPANDED_NODES) -> Any:
    import yaml  # noqa: PLC0415 - lazy: only YAML configs pay for it on the login path

    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        expanded = _expanded_size(node, max_nodes)
        if expanded > max_nodes:
            raise YamlTooLargeError(f"its aliases expand it to more than {max_nodes} values (an alias bomb?)")
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _expanded_size(root: Any, limit: int) -> int:
    """How many nodes the document has once every alias is expanded (stops counting past `limit`)."""
    import yaml  # noqa: PLC0415

    sizes: dict[int, int] = {}
    in_progress: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if key in sizes:
            continue
        if isinstance(node, yaml.ScalarNode):
            sizes[key] = 1
            continue
        children = [part for pair in node.value for part in pair] if isinstance(node, yaml.MappingNode) else node.value
        if children_done:
            in_progress.discard(key)
            sizes[key] = min(limit + 1, 1 + sum(sizes[id(child)] for child in children))
            continue
        if key in in_progress:
            raise YamlTooLargeError("it holds a recursive alias (a value that contains itself)")
        in_progress.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in children if id(child) not in sizes)
    return sizes[id(root)]
