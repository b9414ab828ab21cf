"""Search spaces: YAML files of knobs and their candidate values, validated on load.

A space file looks like::

    description: what this space is for
    knobs:
      per_device_train_batch_size: [8, 16, 32, fits]   # or {min: 8, max: 256, multiple_of: auto}
      precision: [fp32, bf16]
      torch_compile: ["off", inductor]
      torch_compile_mode: [default, max-autotune-no-cudagraphs]   # only with inductor

A batch list that ends with ``fits`` goes on past its largest value: doublings (at most
`LADDER_RUNGS`) while the memory estimate says they fit (`SearchSpace.ladder_candidates`, resolved
once per study by a worker and stored with it, `SearchSpace.with_ladder`). Every error names the
file, the key and what is allowed. One `SearchSpace` serves every backend:
`suggest` samples a trial's values through optuna (a `FixedTrial` on non-zero ranks replays them).
A loaded space is resolved for a run: batch rules for the device (`for_hardware`), a fixed global
batch (`with_global_batch`) and ``--keep-semantics`` (`keep_semantics`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from autotune.errors import SpaceError, UsageError
from autotune.space.defaults import base_knobs
from autotune.space.knobs import CATALOGUE, Value, optimizer_family
from autotune.space.mapping import precision_of as precision_of

BATCH = "per_device_train_batch_size"
LADDER = "fits"  # the last value of a batch list: go on while larger batches fit
LADDER_RUNGS = 3  # doublings past the largest listed batch, at most


@dataclass(frozen=True)
class SizeRule:
    """Batch-size candidates from a rule: multiples of `multiple_of`, doubling from `low` to `high`.

    ``multiple_of: auto`` (None here) is resolved per device by `SearchSpace.for_hardware`.
    """

    low: int
    high: int
    multiple_of: int | None

    def candidates(self, multiple: int) -> tuple[int, ...]:
        first = -(-self.low // multiple) * multiple  # round low up to a multiple
        values, size = [], first
        while size <= self.high:
            values.append(size)
            size *= 2
        return tuple(values)


@dataclass(frozen=True)
class SearchSpace:
    """A validated search space.

    Attributes:
        name: the space's name (file stem).
        source: where it was loaded from, for messages.
        knobs: knob name -> candidate values, in sampling order (a knob another one requires
            comes first).
        description: free text from the file.
        rules: knobs whose candidates come from a `SizeRule` not yet resolved for a device.
        fixed: knobs held at one value and not searched (``--keep-semantics``).
        global_batch: per-device batch x accumulation x world size, when it is fixed.
        world_size: processes training together (for the global batch).
        notes: lines for the run header saying how the space was resolved.
        ladder: the batch list ended with ``fits`` (see `ladder_candidates`).
        ladder_rungs: the batches past the listed ones that fit, once resolved (`with_ladder`);
            None before.
    """

    name: str
    source: str
    knobs: Mapping[str, tuple[Value, ...]]
    description: str = ""
    rules: Mapping[str, SizeRule] = field(default_factory=dict)
    fixed: Mapping[str, Value] = field(default_factory=dict)
    global_batch: int | None = None
    world_size: int = 1
    notes: tuple[str, ...] = ()
    ladder: bool = False
    ladder_rungs: tuple[int, ...] | None = None

    # -- the batch ladder ---------------------------------------------------------------------

    def ladder_candidates(self) -> tuple[int, ...]:
        """The batches a ``fits`` ladder may add, in order: doublings of the largest listed one.
        None when the space has no ladder, holds the batch, or fixes the global batch (only splits
        of it are tried), or when the ladder is already resolved."""
        if not self.ladder or self.ladder_rungs is not None or self.global_batch is not None:
            return ()
        listed = [int(b) for b in self.knobs.get(BATCH, ())]
        if not listed or BATCH in self.fixed:
            return ()
        return tuple(max(listed) * 2**rung for rung in range(1, LADDER_RUNGS + 1))

    def with_ladder(self, rungs: Any) -> SearchSpace:
        """The space with its ladder resolved: `rungs` (the first of `ladder_candidates` that fit,
        as the study stored them) searched after the listed batches.

        Raises:
            SpaceError: `rungs` are not a prefix of the candidates (a study stored by another space).
        """
        candidates = self.ladder_candidates()
        rungs = tuple(int(b) for b in rungs)
        if not candidates:
            return self
        if rungs != candidates[: len(rungs)]:
            raise SpaceError(
                f"{self.source}: the study's batch ladder {list(rungs)} does not continue "
                f"knobs.{BATCH} {list(self.knobs[BATCH])}",
                "continue the study with the space it was started with",
            )
        knobs = {**self.knobs, BATCH: (*self.knobs[BATCH], *rungs)}
        said = ", ".join(map(str, rungs)) if rungs else "none"
        note = f"{BATCH}: + {said} [ladder: larger batches that fit by the memory estimate]"
        return replace(self, knobs=knobs, ladder_rungs=rungs, notes=(*self.notes, note))

    def suggest(self, trial: Any) -> dict[str, Value]:
        """Sample a trial's values from an optuna `Trial` (or replay them from a `FixedTrial`)."""
        self._check_resolved()
        values: dict[str, Value] = {}
        for name, candidates in self.knobs.items():
            if self._applies(name, values):
                values[name] = trial.suggest_categorical(name, list(candidates))
        return self.complete(values)

    def complete(self, sampled: Mapping[str, Value]) -> dict[str, Value]:
        """Add what follows from sampled values: held knobs and the derived accumulation steps."""
        values = {k: v for k, v in sampled.items() if k in self.knobs and self._applies(k, sampled)}
        values.update(self.fixed)
        if self.global_batch is not None:
            per_step = int(values.get("per_device_train_batch_size", self._held_batch())) * self.world_size
            values["gradient_accumulation_steps"] = self.global_batch // per_step
        return values

    def _held_batch(self) -> int:
        """The per-device batch when the space does not search it: held, or the Trainer default."""
        if "per_device_train_batch_size" in self.fixed:
            return int(self.fixed["per_device_train_batch_size"])
        return int(base_knobs()["per_device_train_batch_size"])

    def _applies(self, name: str, values: Mapping[str, Value]) -> bool:
        """Whether knob `name` exists in a trial with `values`: its required knob's value there, or
        (not searched) the value the space holds it at, or its default."""
        requires = CATALOGUE[name].requires
        if requires is None:
            return True
        other, needed = requires
        if other in self.knobs:
            return values.get(other) in needed
        return self.fixed.get(other, base_knobs().get(other)) in needed

    def _check_resolved(self) -> None:
        if self.rules:
            raise SpaceError(f"{self.source}: size rules not resolved for a device (call for_hardware)")

    def hp_space(self, trial: Any) -> dict[str, Any]:
        """The `hp_space` callable for `Trainer.hyperparameter_search`.

        It samples every knob (rank 0 broadcasts `trial.params` to the other ranks, so all of them
        must be suggested here) but hands nothing to the Trainer's own `setattr` path: the trial's
        `TrainingArguments` are rebuilt whole by `AutotuneTrainer.call_model_init`, where
        `__post_init__` can derive autocast, compile and tf32 from them.
        """
        self.suggest(trial)
        return {}

    def grid(self) -> list[dict[str, Value]]:
        """Every point of the space, complete (as `suggest` would return it), in product order of
        the knobs; a knob that another one requires is varied only where it applies."""
        self._check_resolved()
        points: list[dict[str, Value]] = [{}]
        for name, candidates in self.knobs.items():
            points = [
                {**point, name: value} if self._applies(name, point) else point
                for point in points
                for value in (candidates if self._applies(name, point) else candidates[:1])
            ]
        return [self.complete(point) for point in points]

    def grid_size(self) -> int:
        size = 1
        for values in self.knobs.values():
            size *= len(values)
        return size

    def fingerprint(self) -> str:
        """A short hash of what is searched: equal spaces give equal fingerprints."""
        data = self.describe()
        # The ladder's batches follow from the machine's memory, which the study's fingerprint
        # holds: a space is the same whether its ladder is resolved yet or not.
        for key in ("description", "notes", "batch_ladder"):
            data.pop(key)
        canonical = json.dumps(data, sort_keys=True, default=str)
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        """The space in its file form (`parse_space` reads it back): a resolved ladder's batches
        are left out, ``fits`` says there is one."""
        knobs: dict[str, Any] = {k: list(v) for k, v in self.knobs.items()}
        if self.ladder and BATCH in knobs:
            knobs[BATCH] = [*knobs[BATCH][: len(knobs[BATCH]) - len(self.ladder_rungs or ())], LADDER]
        for name, rule in self.rules.items():
            knobs[name] = {"min": rule.low, "max": rule.high, "multiple_of": rule.multiple_of or "auto"}
        return {"description": self.description, "knobs": knobs}

    def describe(self) -> dict[str, Any]:
        """The file form plus how it was resolved for this run (stored with the study)."""
        return {
            **self.to_dict(),
            "fixed": dict(self.fixed),
            "global_batch": self.global_batch,
            "world_size": self.world_size,
            "notes": list(self.notes),
            "batch_ladder": list(self.ladder_rungs) if self.ladder_rungs is not None else None,
        }

    # -- resolving for a run ------------------------------------------------------------------

    def for_hardware(self, multiple: int, why: str) -> SearchSpace:
        """Resolve ``multiple_of: auto`` rules with the device's batch multiple."""
        if not self.rules:
            return self
        knobs = dict(self.knobs)
        notes = list(self.notes)
        for name, rule in self.rules.items():
            step = rule.multiple_of or multiple
            candidates = rule.candidates(step)
            if not candidates:
                smallest = -(-rule.low // step) * step
                raise SpaceError(
                    f"{self.source}: knobs.{name}: no multiple of {step} between {rule.low} and {rule.high}",
                    f"raise max to at least {smallest}",
                )
            knobs[name] = candidates
            origin = f"auto ({why})" if rule.multiple_of is None else f"multiple_of {step}"
            notes.append(f"{name}: {', '.join(map(str, candidates))} [{origin}]")
        return replace(self, knobs=sampling_order(knobs), rules={}, notes=tuple(notes))

    def for_world_size(self, world_size: int) -> tuple[SearchSpace, list[str]]:
        """Leave out the knobs that only exist in trials of more than one rank (DDP's own
        settings) when a trial has one; return the space and a line for each knob left out."""
        if world_size > 1:
            return self, []
        gone = [name for name in self.knobs if CATALOGUE[name].ranks_only]
        knobs = {name: values for name, values in self.knobs.items() if name not in gone}
        return replace(self, knobs=knobs), [f"{name}: only in trials of more than one rank" for name in gone]

    def without(self, reason_of: Callable[[str, Value], str | None]) -> tuple[SearchSpace, list[str]]:
        """Drop the candidates `reason_of` says cannot run here; return the space and what went.

        Raises:
            SpaceError: a knob is left with no candidate, or a held value cannot run.
        """
        knobs: dict[str, tuple[Value, ...]] = {}
        dropped: list[str] = []
        for name, candidates in self.knobs.items():
            reasons = {value: reason_of(name, value) for value in candidates}
            kept = tuple(v for v in candidates if reasons[v] is None)
            dropped += [f"{name}={v}: {reasons[v]}" for v in candidates if reasons[v] is not None]
            if not kept:
                why = "; ".join(dict.fromkeys(str(r) for r in reasons.values()))  # each reason once
                raise SpaceError(
                    f"{self.source}: no value of knobs.{name} can run here ({why})",
                    "add a value that runs on this machine (see `autotune knobs`)",
                )
            knobs[name] = kept
        # A knob whose condition can no longer hold (a compile mode once inductor is gone) goes too.
        for name in list(knobs):
            requires = CATALOGUE[name].requires
            if requires is not None and not set(possible_values(requires[0], knobs, self.fixed)) & set(
                requires[1]
            ):
                dropped.append(f"{name}: only applies with {requires[0]} in {list(requires[1])}")
                del knobs[name]
        for name, value in self.fixed.items():
            reason = reason_of(name, value)
            if reason is not None:
                raise UsageError(
                    f"the base config's {name}={value} cannot run here: {reason}",
                    "change base_args",
                    field="base_args",
                )
        return replace(self, knobs=knobs), dropped

    def with_global_batch(self, global_batch: int, world_size: int = 1) -> SearchSpace:
        """Only splits with per-device batch x accumulation x world size == `global_batch`.

        The per-device batch is searched among the candidates that have a matching accumulation
        candidate; the accumulation is derived from it.

        Raises:
            UsageError: no split of the candidates reaches `global_batch`.
        """
        self._check_resolved()
        batches = self.knobs.get("per_device_train_batch_size") or (self._held_batch(),)
        accumulations = self.knobs.get("gradient_accumulation_steps", (1,))
        splits = global_batch_splits(batches, accumulations, world_size, global_batch)
        if not splits:
            reachable = sorted({int(b) * int(a) * world_size for b in batches for a in accumulations})
            raise UsageError(
                f"global batch size {global_batch} is not reachable: per-device batch "
                f"{list(batches)} x accumulation {list(accumulations)} x {world_size} process(es)",
                f"use one of {reachable}, or add candidates to the space",
            )
        knobs = {k: v for k, v in self.knobs.items() if k != "gradient_accumulation_steps"}
        knobs["per_device_train_batch_size"] = tuple(b for b, _ in splits)
        split_text = ", ".join(f"{b}x{a}" for b, a in splits)
        note = f"global batch {global_batch} = batch x accumulation x {world_size} rank(s): {split_text}"
        return replace(
            self,
            knobs=sampling_order(knobs),
            global_batch=global_batch,
            world_size=world_size,
            notes=(*self.notes, note),
            ladder=False,  # only splits of the global batch: no larger batches
        )

    def keep_semantics(self, base: Mapping[str, Any], world_size: int = 1) -> SearchSpace:
        """Hold the knobs that change the training math at the base config; search the rest.

        Precision is fixed to the base's; the optimizer keeps the base's family (implementations
        of the same update stay searchable); the effective batch is held by fixing the global batch.
        """
        knobs = dict(self.knobs)
        fixed = dict(self.fixed)
        notes = list(self.notes)
        held = base_knobs(base)
        if "precision" in knobs:
            knobs.pop("precision")
            fixed["precision"] = held["precision"]
        if "optim" in knobs:
            base_optim = str(held["optim"])
            same = tuple(
                o for o in knobs["optim"] if optimizer_family(str(o)) == optimizer_family(base_optim)
            )
            if len(same) > 1 or (same and same[0] != base_optim):
                knobs["optim"] = same
            else:
                knobs.pop("optim")
                fixed["optim"] = base_optim
        if "group_by_length" in knobs:  # the data order is part of the training run
            knobs.pop("group_by_length")
            fixed["group_by_length"] = held["group_by_length"]
        if "packing" in knobs and "packing" in held:  # an SFTConfig's: which samples share a row
            knobs.pop("packing")
            fixed["packing"] = held["packing"]
        if "per_device_train_batch_size" not in knobs:
            fixed["per_device_train_batch_size"] = held["per_device_train_batch_size"]
        shown = ", ".join(f"{k}={v}" for k, v in fixed.items())
        notes.append(f"keep semantics: {shown or 'nothing to hold'}")
        space = replace(self, knobs=sampling_order(knobs), fixed=fixed, notes=tuple(notes))
        global_batch = int(held["per_device_train_batch_size"]) * int(held["gradient_accumulation_steps"])
        return space.with_global_batch(global_batch * world_size, world_size)


def global_batch_splits(
    batches: tuple[Value, ...], accumulations: tuple[Value, ...], world_size: int, global_batch: int
) -> list[tuple[int, int]]:
    """The (per-device batch, accumulation) pairs of the candidates whose product with the world
    size is `global_batch`, smallest accumulation first within increasing batch."""
    if global_batch < 1 or world_size < 1:
        return []
    return sorted(
        (int(b), int(a))
        for b in batches
        for a in accumulations
        if int(b) * int(a) * world_size == global_batch
    )


def sampling_order(knobs: Mapping[str, tuple[Value, ...]]) -> dict[str, tuple[Value, ...]]:
    """Knobs in sampling order: a knob that another requires comes before it."""
    first = {k: v for k, v in knobs.items() if CATALOGUE[k].requires is None}
    return {**first, **{k: v for k, v in knobs.items() if k not in first}}


def possible_values(
    name: str, knobs: Mapping[str, tuple[Value, ...]], fixed: Mapping[str, Value] | None = None
) -> tuple[Value, ...]:
    """The values knob `name` can take in a space: its candidates when searched, else the value it
    is held at, else its default (`base_knobs`: a knob left out is left at the Trainer's)."""
    if name in knobs:
        return tuple(knobs[name])
    fixed = fixed or {}
    if name in fixed:
        return (fixed[name],)
    default = base_knobs().get(name)
    return () if default is None else (default,)
