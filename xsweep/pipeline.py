"""The one pipeline from a plan to its program: load, validate, analyse, lower.

Every command and the batched evaluator call :func:`prepare`, so a plan means the
same thing everywhere: a plan read from a file and a plan built in memory (by a
sweep's planner, an optimizer, a notebook) pass the same checks before anything
is computed from them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from xsweep.errors import InputError
from xsweep.plan.analysis import PlanAnalysis, analyze
from xsweep.plan.lower import TemplateCache, lower
from xsweep.plan.program import Program
from xsweep.spec.catalog import Catalog, load_catalog
from xsweep.spec.plan_io import DeploymentPlan, load_valid_plan
from xsweep.spec.profile import Profile, load_profile
from xsweep.spec.valid_plan import ValidPlan
from xsweep.spec.validate import typed_plan, validate_plan


@dataclass(frozen=True, eq=False)
class Prepared:
    """A validated plan, its static analysis and the program of one iteration."""

    valid: ValidPlan
    analysis: PlanAnalysis
    program: Program
    source: str | None = None  # the file it came from, if any

    @property
    def plan(self) -> DeploymentPlan:
        """The plan's message."""
        return self.valid.message

    @property
    def name(self) -> str:
        return self.analysis.name


def resolve_inputs(catalog: Catalog | None = None, profile: Profile | str | Path | None = None,
                   ) -> tuple[Catalog, Profile | None]:
    """The catalog (default: the built-in one) and the profile (read if given as a path)."""
    catalog = catalog if catalog is not None else load_catalog()
    if isinstance(profile, str | Path):
        profile = load_profile(profile, catalog)
    return catalog, profile


def load(plan: ValidPlan | DeploymentPlan | str | Path,
         catalog: Catalog) -> tuple[ValidPlan, str | None]:
    """A validated plan from a message or a file path, and the file it came from (a plan
    validated against ``catalog`` already is taken as it is)."""
    if isinstance(plan, str | Path):
        return load_valid_plan(plan, catalog), str(plan)
    if isinstance(plan, ValidPlan) and plan.catalog is catalog:
        return plan, None
    if isinstance(plan, ValidPlan):
        plan = plan.message
    if not isinstance(plan, DeploymentPlan):
        raise InputError(None, "plan", type(plan).__name__,
                         "expected a DeploymentPlan message or a path to a plan file")
    return validate_plan(plan, catalog, plan.name or None), None


def prepare_valid(plan: ValidPlan | DeploymentPlan, catalog: Catalog,
                  profile: Profile | None = None, *, templates: TemplateCache | None = None,
                  names: bool = True, source: str | None = None,
                  before_lowering: Callable[[PlanAnalysis], None] | None = None) -> Prepared:
    """Analyse and lower a plan that :func:`load` (or ``validate_plan``) already checked:
    the :class:`ValidPlan` it returned, or the message (typed again:
    :func:`xsweep.spec.validate.typed_plan`). ``before_lowering`` is called with the
    analysis before the program is built (a check that may stop there)."""
    if not isinstance(plan, ValidPlan) or plan.catalog is not catalog:
        plan = typed_plan(plan.message if isinstance(plan, ValidPlan) else plan, catalog,
                          plan.name or None)
    analysis = analyze(plan, catalog, profile=profile)
    if before_lowering is not None:
        before_lowering(analysis)
    return Prepared(plan, analysis, lower(analysis, templates=templates, names=names), source)


def prepare(plan: ValidPlan | DeploymentPlan | str | Path, catalog: Catalog | None = None,
            profile: Profile | str | Path | None = None, *,
            templates: TemplateCache | None = None, names: bool = True,
            before_lowering: Callable[[PlanAnalysis], None] | None = None) -> Prepared:
    """Load (if a path), validate, analyse and lower one plan.

    Args:
      plan: a ``DeploymentPlan`` message, the path of a ``.pbtxt`` / ``.json`` plan, or a
        plan :func:`xsweep.spec.validate.validate_plan` returned.
      catalog: GPUs, NICs and models (default: the built-in catalog).
      profile: measured layer times overriding the estimates, or the path of one.
      templates: program structures kept between calls (see ``xsweep.plan.lower``).
      names: name every task of the program (for traces and reports).
      before_lowering: called with the plan's analysis before its program is built.

    Raises:
      InputError: the plan (or profile) is invalid, naming file, field and value.
    """
    catalog, profile = resolve_inputs(catalog, profile)
    valid, source = load(plan, catalog)
    return prepare_valid(valid, catalog, profile, templates=templates, names=names,
                         source=source, before_lowering=before_lowering)
