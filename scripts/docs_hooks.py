"""MkDocs hooks (mkdocs.yml, ``hooks:``): the generated parts of the reference pages.

- ``reference/openapi.json``: the OpenAPI document the service serves at ``/openapi.json``,
  from ``hookrelay.service.api.openapi.spec()`` (no server is started).
- ``reference/http-api.md``: every operation of that document, rendered where the page
  has ``<!-- generated:operations -->``.
- ``reference/cli.md``: ``hookrelay --help`` and every subcommand's ``--help``, where the
  page has ``<!-- generated:help -->``.

On GitHub those markers are plain comments; the pages say where the generated text is.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

OPERATIONS = "<!-- generated:operations -->"
HELP = "<!-- generated:help -->"
METHODS = ("get", "put", "post", "patch", "delete")


def _spec() -> dict[str, Any]:
    from hookrelay.service.api.openapi import spec

    return spec()


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    text = json.dumps(_spec(), indent=2) + "\n"
    files.append(File.generated(config, "reference/openapi.json", content=text))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if page.file.src_uri == "reference/http-api.md":
        return markdown.replace(OPERATIONS, operations(_spec()))
    if page.file.src_uri == "reference/cli.md":
        return markdown.replace(HELP, help_pages())
    return markdown


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _schema_text(schema: dict[str, Any]) -> str:
    """A parameter's schema in a table cell: its type or enum, and its pattern."""
    if "enum" in schema:
        return " \\| ".join(f"`{v}`" for v in schema["enum"])
    kind = schema.get("type", "any")
    text = " or ".join(kind) if isinstance(kind, list) else str(kind)
    for key in ("format", "pattern", "minimum", "maximum", "maxLength"):
        if key in schema:
            text += f", {key} `{schema[key]}`"
    return text


def _block(schema: Any) -> list[str]:
    return ["```json", json.dumps(schema, indent=2, ensure_ascii=False), "```", ""]


def operations(spec: dict[str, Any]) -> str:
    """Markdown for every operation of ``spec``, in the document's order."""
    out: list[str] = []
    default_security = spec.get("security")
    for path, item in spec["paths"].items():
        for method in METHODS:
            op = item.get(method)
            if op is None:
                continue
            out += [f"### `{method.upper()} {path}`", "", op.get("summary", ""), ""]
            out += [f"Operation `{op['operationId']}`, tag {', '.join(op['tags'])}.", ""]
            if op.get("description"):
                out += [op["description"], ""]
            secured = op.get("security", default_security)
            out += [
                "Credentials: `Authorization: Bearer` (see the table above for whose)."
                if secured
                else "Credentials: none.",
                "",
            ]
            params = op.get("parameters", [])
            if params:
                out += ["| parameter | in | required | schema | description |"]
                out += ["|---|---|---|---|---|"]
                for p in params:
                    out.append(
                        f"| `{p['name']}` | {p['in']} | {'yes' if p.get('required') else 'no'} "
                        f"| {_cell(_schema_text(p.get('schema', {})))} "
                        f"| {_cell(p.get('description', ''))} |"
                    )
                out.append("")
            body = op.get("requestBody")
            if body:
                (media, content), *_ = body["content"].items()
                required = "required" if body.get("required") else "optional"
                name = content["schema"]["$ref"].removeprefix("#/components/schemas/")
                out += [f"Request body ({media}, {required}): [{name}](#{name.lower()}).", ""]
            out += ["| status | answer |", "|---|---|"]
            for status, answer in op["responses"].items():
                media_types = ", ".join(answer.get("content", {})) or "no body"
                out.append(f"| {status} | {_cell(answer.get('description', ''))} ({media_types}) |")
            out.append("")
    out += ["## Schemas", ""]
    for name, schema in spec.get("components", {}).get("schemas", {}).items():
        out += [f"### {name}", ""] + _block(schema)
    return "\n".join(out)


def _commands(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """``parser`` and every subcommand's parser under it, depth first."""
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                found += _commands(sub)
    return found


def help_pages() -> str:
    from hookrelay.service.cli import _parser

    # argparse wraps to the terminal's width: the same width on every machine.
    columns = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "80"
    try:
        out: list[str] = []
        for parser in _commands(_parser()):
            text = parser.format_help().rstrip()
            out += [f"### `{parser.prog}`", "", "```text", text, "```", ""]
    finally:
        if columns is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = columns
    return "\n".join(out)
