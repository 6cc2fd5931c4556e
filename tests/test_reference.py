"""``docs/reference.md`` documents every job of ``plugin.yaml``, whether it is served, exactly the arguments it takes
and each one's default, as the code has them (``jobs/arguments.py``): a new job, argument or default cannot go
undocumented, and a documented one cannot outlive the code."""

from __future__ import annotations

import re

import pytest
import yaml
from pydantic import BaseModel
from pydantic_core import PydanticUndefined
from reme_procedure_memory.jobs.arguments import MODELS, argument_names
from reme_procedure_memory.settings import ProcedureSettings

from helpers import REPO

REFERENCE = REPO / "docs" / "reference.md"
JOBS = yaml.safe_load((REPO / "plugin.yaml").read_text())["application_defaults"]["jobs"]


def sections() -> dict[str, str]:
    """``### `job` `` -> its text, within the reference's Jobs section."""
    jobs = REFERENCE.read_text().split("\n## Jobs\n", 1)[1].split("\n## ", 1)[0]
    parts = re.split(r"^### `([a-z_]+)`\n", jobs, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2]))


def rows(section: str) -> dict[str, str]:
    """The section's argument table: argument -> its default cell."""
    found = re.findall(r"^\| `([^`]+)` \| ([^|]+?) \|", section, flags=re.MULTILINE)
    assert len(found) == len(set(name for name, _ in found)), found
    return dict(found)


def test_every_job_of_the_plugin_is_documented_once():
    assert sorted(sections()) == sorted(JOBS) == sorted(MODELS)


@pytest.mark.parametrize("job", sorted(MODELS))
def test_each_job_documents_where_it_is_served(job):
    served = JOBS[job].get("enable_serve", True) is not False
    first = sections()[job].strip().splitlines()[0]
    assert first.startswith("Served: HTTP, MCP, the `reme` client" if served else "Not served"), first


@pytest.mark.parametrize("job", sorted(MODELS))
def test_each_job_documents_exactly_its_arguments_and_their_defaults(job):
    model, documented = MODELS[job], rows(sections()[job])
    assert sorted(documented) == sorted(argument_names(model))
    for name, info in model.model_fields.items():
        cell = documented[info.alias or name]
        if info.is_required():
            assert cell == "required", (job, name, cell)
        elif info.default not in (None, "", PydanticUndefined):  # a plain value: written as the code has it
            assert cell == f"`{info.default}`", (job, name, cell)
        else:  # computed (a factory, or decided by the job): said in words, not as one value
            assert cell != "required" and not re.fullmatch(r"`[^`]*`", cell), (job, name, cell)


def leaves_of(node: dict, prefix: str = "") -> dict[str, object]:
    """The leaves of a nested mapping by dotted key."""
    out: dict[str, object] = {}
    for key, value in node.items():
        if isinstance(value, dict):
            out |= leaves_of(value, f"{prefix}{key}.")
        else:
            out[f"{prefix}{key}"] = value
    return out


def plugin_settings() -> dict[str, object]:
    """The leaves of ``components.procedure_memory.default`` in ``plugin.yaml`` (dotted keys), but its backend."""
    block = yaml.safe_load((REPO / "plugin.yaml").read_text())["application_defaults"]["components"]
    out = leaves_of(block["procedure_memory"]["default"])
    out.pop("backend")
    return out


def test_the_settings_table_equals_the_plugin_settings_and_their_defaults():
    section = REFERENCE.read_text().split("\n## Settings\n", 1)[1].split("\n## ", 1)[0]
    documented = rows(section)
    settings = plugin_settings()
    assert sorted(documented) == sorted(settings)
    for key, value in settings.items():
        assert documented[key] == f"`{value}`", (key, documented[key], value)


def test_every_setting_of_the_model_is_in_plugin_yaml():
    """The typed settings (``settings.py``) and the manifest name the same keys, so the table covers both."""

    def leaves(model, prefix: str = "") -> set[str]:
        out = set()
        for name, info in model.model_fields.items():
            sub = info.annotation
            if isinstance(sub, type) and issubclass(sub, BaseModel):
                out |= leaves(sub, f"{prefix}{name}.")
            elif isinstance(info.default_factory, type(lambda: 0)) and isinstance(info.default_factory(), dict):
                out |= {f"{prefix}{name}.{key}" for key in info.default_factory()}
            else:
                out.add(f"{prefix}{name}")
        return out

    assert leaves(ProcedureSettings) == set(plugin_settings())


def test_the_manifest_values_equal_the_typed_defaults():
    """``plugin.yaml`` and ``settings.py`` both carry each default (ReMe hands the manifest's values to the plugin;
    the typed model applies when a key is left out): they must be the same value, or a changed default takes effect
    on one path only. A manifest value ``${NAME:-default}`` is read as its default (the variable unset)."""

    def unset(value: object) -> object:
        match = re.fullmatch(r"\$\{\w+:-(.*)\}", value) if isinstance(value, str) else None
        return match.group(1) if match else value

    manifest = {key: unset(value) for key, value in plugin_settings().items()}
    assert leaves_of(ProcedureSettings().model_dump()) == manifest
