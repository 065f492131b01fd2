"""The one way dsbench reads YAML (accelerate configs, matrix files): ``yaml.safe_load``'s types, bounded.

``yaml.SafeLoader`` builds no objects from tags, but it has three ways to take a machine down or to say
something other than what the file says: aliases that expand to billions of values ("billion laughs": an alias
is one object, but everything that walks the result expands it), keys that appear twice (the last wins
silently), and numbers beyond Python's 4300-digit conversion limit (a ValueError, not a YAMLError). Keys that are
not scalars (``? [a, b]``) cannot name a setting. Merge keys (``<<: *base``) are applied as YAML 1.1 does.
"""

from __future__ import annotations

from typing import Any

MAX_YAML_NODES = 100_000
"""Most values a YAML file may expand to, aliases counted at every use (an accelerate config has under 100, a
matrix file a few dozen): past it the file is refused before anything is built from it."""
_SCALAR_KEYS = (str, int, float, bool, type(None))


class YamlProblem(ValueError):
    """The file is not YAML dsbench reads; the message names the file (and line and column when known)."""


def _loader() -> Any:
    import yaml

    class _Loader(yaml.SafeLoader):
        pass

    def mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # merged keys may be overridden by the mapping's own (SafeLoader.flatten_mapping)
            key = loader.construct_object(key_node, deep=deep)
            mark = key_node.start_mark
            if not isinstance(key, _SCALAR_KEYS):
                raise yaml.constructor.ConstructorError(None, None, f"a {type(key).__name__} as a key (line "
                                                        f"{mark.line + 1}): settings are named by text", mark)
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"key '{key}' appears twice (line "
                                                        f"{mark.line + 1})", mark)
            seen.add(key)
        return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)

    _Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    return _Loader


def expanded_size(root: Any) -> int:
    """Values of a composed document with every alias expanded, memoised per node and capped just past the bound;
    a node that contains itself (``&a [*a]``) counts as past the bound."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()

    def size(node: Any) -> int:
        if id(node) in sizes:
            return sizes[id(node)]
        if id(node) in on_path:
            return MAX_YAML_NODES + 1
        on_path.add(id(node))
        value = node.value if isinstance(node.value, list) else []
        children = [c for pair in value for c in pair] if value and isinstance(value[0], tuple) else value
        total = 1
        for child in children:
            total = min(total + size(child), MAX_YAML_NODES + 1)
            if total > MAX_YAML_NODES:
                break
        on_path.discard(id(node))
        sizes[id(node)] = total
        return total

    return size(root)


def load_yaml(text: str, source: str) -> Any:
    """The YAML document in ``text`` (None for an empty one); every way it can be refused is a :class:`YamlProblem`
    naming ``source``."""
    import yaml

    loader = _loader()(text)
    try:
        node = loader.get_single_node()
        if node is not None and expanded_size(node) > MAX_YAML_NODES:
            raise YamlProblem(f"{source}: its aliases expand to over {MAX_YAML_NODES:,} values, or refer to "
                              "themselves; a configuration file has a few dozen (a YAML alias bomb?)")
        return loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise YamlProblem(f"{source}{where}: not valid YAML ({problem})") from None
    except RecursionError:
        raise YamlProblem(f"{source}: nested too deeply to be a configuration file") from None
    except ValueError as exc:  # int('9' * 5000): "Exceeds the limit (4300 digits) for integer string conversion"
        if isinstance(exc, YamlProblem):
            raise
        raise YamlProblem(f"{source}: a number too long to read ({str(exc).split(':')[0][:80]})") from None
    finally:
        loader.dispose()
