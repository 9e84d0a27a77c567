"""Manifest text (YAML or JSON, one or many documents) -> plain Python data. Pure: no files.

Every YAML the project reads (manifests, CRL files, --config) goes through `load_yaml_documents`,
which reads YAML the way Kubernetes' own reader (sigs.k8s.io/yaml over go-yaml) does where it
matters for hostile input:
- alias expansion is bounded by go-yaml's rule (decode.go `allowedAliasRatio` and the check in
  `decoder.unmarshal`, gopkg.in/yaml.v2 >= 2.2.8 and v3; the fix for CVE-2019-11253): after 1,000
  decoded nodes of which more than 100 came from aliases, a document whose alias-driven share
  exceeds 99% (scaling down to 10% between 400,000 and 4,000,000 nodes) is refused with
  "excessive aliasing", and an anchor that contains itself is refused;
- timestamps stay strings (sigs.k8s.io/yaml converts YAML to JSON, where `creationTimestamp:
  2024-01-01T00:00:00Z` is the string the API server expects, never a datetime);
- numbers must fit JSON and Kubernetes: no .inf/.nan, no integer beyond 64 bits.
"""

from __future__ import annotations

import json
import math
from typing import Any

import yaml

from webhook.core.base.errors import ManifestError

# go-yaml decode.go: alias_ratio_range_low / alias_ratio_range_high.
_ALIAS_RATIO_LOW = 400_000
_ALIAS_RATIO_HIGH = 4_000_000
_INT_MIN = -(2**63)
_UINT_MAX = 2**64 - 1


def yaml_error_text(exc: yaml.YAMLError) -> str:
    """PyYAML's error as one line with the position (its own text spans several lines)."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        context = f" ({exc.context})" if exc.context else ""
        return f"{exc.problem}{context} at line {mark.line + 1}, column {mark.column + 1}"
    return " ".join(str(exc).split())


def _allowed_alias_ratio(decode_count: int) -> float:
    """go-yaml's allowedAliasRatio: 99% for small documents, down to 10% for very large ones."""
    if decode_count <= _ALIAS_RATIO_LOW:
        return 0.99
    if decode_count >= _ALIAS_RATIO_HIGH:
        return 0.10
    span = _ALIAS_RATIO_HIGH - _ALIAS_RATIO_LOW
    return 0.99 - 0.89 * ((decode_count - _ALIAS_RATIO_LOW) / span)


def _check_aliasing(root: yaml.Node, where: str) -> None:
    """Count nodes as go-yaml decodes them (aliases expanded) and stop at excessive aliasing.

    PyYAML composes an alias as a second reference to the anchored node, so a node reached
    again is an alias expansion. Iterative: deep documents cannot exhaust the Python stack here.
    """
    decode_count = alias_count = 0
    seen: set[int] = set()
    # (node, alias depth, leaving?) — leaving entries pop a node off the current path.
    stack: list[tuple[yaml.Node, int, bool]] = [(root, 0, False)]
    path: set[int] = set()
    while stack:
        node, depth, leaving = stack.pop()
        if leaving:
            path.discard(id(node))
            continue
        if id(node) in path:
            raise ManifestError(f"{where}: an anchor's value contains itself (a recursive alias)")
        if id(node) in seen:
            depth += 1  # reached again: this is an alias being expanded
        seen.add(id(node))
        decode_count += 1
        if depth:
            alias_count += 1
        if (
            alias_count > 100
            and decode_count > 1000
            and alias_count / decode_count > _allowed_alias_ratio(decode_count)
        ):
            raise ManifestError(
                f"{where}: document contains excessive aliasing (YAML anchors and aliases that "
                "expand to far more data than was written, as in a 'billion laughs' attack); "
                "Kubernetes refuses it too"
            )
        children: list[yaml.Node] = []
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        if children:
            path.add(id(node))
            stack.append((node, depth, True))
            stack.extend((child, depth, False) for child in reversed(children))


class _KubeLoader(yaml.SafeLoader):
    """SafeLoader minus timestamps, with numbers that fit JSON (see the module docstring)."""

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        text = str(node.value).replace("_", "").lstrip("+-")
        # Python refuses to parse integers over 4,300 digits (and they fit nothing anyway).
        if len(text) > 40:
            raise _number_error(node, node.value)
        value = int(super().construct_yaml_int(node))
        if not _INT_MIN <= value <= _UINT_MAX:
            raise _number_error(node, node.value)
        return value

    def construct_yaml_float(self, node: yaml.ScalarNode) -> float:
        value = float(super().construct_yaml_float(node))
        if not math.isfinite(value):
            raise _number_error(node, node.value)
        return value

    def construct_binary_text(self, node: yaml.ScalarNode) -> str:
        # sigs.k8s.io/yaml: go-yaml decodes !!binary to bytes, which JSON carries as base64.
        return "".join(str(node.value).split())

    def construct_timestamp_text(self, node: yaml.ScalarNode) -> str:
        return str(self.construct_scalar(node))


def _number_error(node: yaml.Node, text: object) -> yaml.constructor.ConstructorError:
    return yaml.constructor.ConstructorError(
        None, None, f"number {str(text)[:40]!r} is out of range for JSON", node.start_mark
    )


_KubeLoader.add_constructor("tag:yaml.org,2002:int", _KubeLoader.construct_yaml_int)
_KubeLoader.add_constructor("tag:yaml.org,2002:float", _KubeLoader.construct_yaml_float)
_KubeLoader.add_constructor("tag:yaml.org,2002:binary", _KubeLoader.construct_binary_text)
_KubeLoader.add_constructor("tag:yaml.org,2002:timestamp", _KubeLoader.construct_timestamp_text)
# Unquoted timestamps resolve as plain strings (copy: the resolver table is shared by class).
_KubeLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def load_yaml_documents(text: str, where: str) -> list[Any]:
    """Every non-empty YAML document of `text`; raises ManifestError with a one-line reason."""
    loader = _KubeLoader(text)
    documents: list[Any] = []
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            _check_aliasing(node, where)
            document = loader.construct_document(node)
            if document is not None:
                documents.append(document)
    except yaml.YAMLError as exc:
        raise ManifestError(f"{where} is not valid YAML: {yaml_error_text(exc)}") from None
    except RecursionError:
        raise ManifestError(f"{where} is nested too deeply to be a Kubernetes object") from None
    finally:
        loader.dispose()
    return documents


def _json_int(text: str) -> int:
    if len(text.lstrip("-")) > 40 or not _INT_MIN <= int(text) <= _UINT_MAX:
        raise ValueError(f"number {text[:40]!r} is out of range")
    return int(text)


def _json_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def load_json(text: str, where: str) -> Any:
    try:
        return json.loads(text, parse_int=_json_int, parse_constant=_json_constant)
    except RecursionError:
        raise ManifestError(f"{where} is nested too deeply to be a Kubernetes object") from None
    except ValueError as exc:
        raise ManifestError(f"{where} is not valid JSON: {exc}") from None


def parse_documents(text: str, where: str) -> list[Any]:
    docs = [load_json(text, where)] if where.endswith(".json") else load_yaml_documents(text, where)
    expanded: list[Any] = []
    for index, doc in enumerate(docs, 1):
        # `kubectl get -o yaml` output: a List of items.
        if isinstance(doc, dict) and doc.get("kind") in ("List", "ConfigMapList"):
            items = doc.get("items")
            if items is None:
                continue
            if not isinstance(items, list):
                raise ManifestError(
                    f"{where}: document {index} is a {doc['kind']} whose items is a "
                    f"{type(items).__name__}, not a list"
                )
            expanded.extend(items)
        else:
            expanded.append(doc)
    return expanded
