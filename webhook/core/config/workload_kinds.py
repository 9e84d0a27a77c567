"""The webhook config's `workloads`: admin-added workload kinds and where their pod templates
live, turned into the kinds registry's WorkloadKind."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from webhook.core.config.fields import _Model
from webhook.core.kinds.registry import Form, TemplateRule, WorkloadKind, rule, virtual_container


class WorkloadContainer(_Model):
    """A container an operator builds from fields of its own object (form `container`): paths
    relative to the template's path, no wildcards."""

    name: str = Field(min_length=1)
    resources: str
    image: str = ""
    env: str = ""


class WorkloadTemplate(_Model):
    """Where one pod template of an admin-added kind lives (paths: core/kinds/registry)."""

    path: str
    role: str = ""
    form: Literal["template", "podSpec", "container"] = "template"
    name_field: str = "name"
    containers: tuple[str, ...] = ()
    container: WorkloadContainer | None = None
    image_from: str = ""
    annotations: tuple[str, ...] | None = None

    def to_rule(self) -> TemplateRule:
        form: Form = "podspec" if self.form == "podSpec" else self.form
        c = self.container
        return rule(
            self.path,
            self.role,
            form,
            self.name_field,
            self.containers,
            virtual=virtual_container(c.name, c.resources, c.image, c.env) if c else None,
            image_from=self.image_from,
            annotations=self.annotations,
        )

    @model_validator(mode="after")
    def _valid(self) -> WorkloadTemplate:
        self.to_rule()  # raises ValueError with the reason
        return self


class WorkloadEntry(_Model):
    """An admin-added workload kind: `group` is the API group ("" for the core group)."""

    group: str
    kind: str = Field(pattern=r"^[A-Z][A-Za-z0-9]*$")
    templates: tuple[WorkloadTemplate, ...] = Field(min_length=1)

    def to_kind(self) -> WorkloadKind:
        return WorkloadKind(
            self.group, self.kind, tuple(t.to_rule() for t in self.templates), "webhook config"
        )
