"""The webhook config's `workloads`: admin-added workload kinds and where their pod templates
live, turned into the kinds registry's WorkloadKind."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from webhook.core.config.fields import ConfigModel
from webhook.core.kinds.registry import Form, TemplateRule, WorkloadKind, rule, virtual_container


class WorkloadContainer(ConfigModel):
    """A container an operator builds from fields of its own object (form `container`): paths
    relative to the template's path, no wildcards."""

    # The name of the container the operator makes, for messages.
    name: str = Field(min_length=1)
    # The path of its ResourceRequirements (limits/requests).
    resources: str
    # The path of its image string ("": none; the image comes from elsewhere).
    image: str = ""
    # The path of its list of EnvVar ("": none).
    env: str = ""


class WorkloadTemplate(ConfigModel):
    """Where one pod template of an admin-added kind lives (paths: core/kinds/registry)."""

    # Dot-separated keys from the object's root; `*` visits every value of a map and `[*]`
    # every item of a list, each capturing its key or the item's `nameField`.
    path: str
    # How messages name the pods there: a format string over the captures ("replica {0}").
    role: str = ""
    # What is at the path: a PodTemplateSpec (`template`), an object with PodSpec fields inlined
    # (`podSpec`), or fields from which the operator builds one container (`container`).
    form: Literal["template", "podSpec", "container"] = "template"
    # The field of each list item that `[*]` captures.
    name_field: str = "name"
    # podSpec form: keys holding one container-like object with `resources` that the operator
    # turns into a container (KServe's `model`).
    containers: tuple[str, ...] = ()
    # container form: the fields the container is built from (required there, refused elsewhere).
    container: WorkloadContainer | None = None
    # Where a container that names no image gets one ("the serving runtime"; "": the user
    # gives it): such a container gets no "CUDA version unknown" advice, since its pods are
    # checked when they are created.
    image_from: str = ""
    # Paths (from the object's root, no wildcard) of the annotation maps the pods get, merged in
    # order; null: the form's own (a template's metadata.annotations; for podSpec, the object's
    # metadata.annotations and its own `annotations`; none for container).
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


class WorkloadEntry(ConfigModel):
    """An admin-added workload kind: `group` is the API group ("" for the core group)."""

    # The kind's API group ("" for the core group), as in the object's apiVersion.
    group: str
    # The kind, as in the object's `kind`.
    kind: str = Field(pattern=r"^[A-Z][A-Za-z0-9]*$")
    # Where its pod templates live: one entry per template path.
    templates: tuple[WorkloadTemplate, ...] = Field(min_length=1)

    def to_kind(self) -> WorkloadKind:
        return WorkloadKind(
            self.group, self.kind, tuple(t.to_rule() for t in self.templates), "webhook config"
        )
