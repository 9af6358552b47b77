# SPDX-License-Identifier: BSD-3-Clause
# SPDX-License-Identifier: Apache-2.0
"""Precision advisor: which modules to run with int16 activations, chosen by measurement.

``advise`` quantizes the model all-int8 and all-int16 and lowers both, which gives the SQNR
(against the float model) each precision reaches and, from Vela's per-layer estimate attributed
to ``nn.Module``s (``module_profile``), the NPU cycles each candidate module costs in either.
Where the all-int16 program fits ``cycle_budget`` times the all-int8 cycles (and measures no
worse than all-int8), that is the choice (strategy ``"int16"``). Otherwise it measures each
candidate's SQNR gain when it alone is int16 (one quantization each, no lowering), and adds
candidates in order of gain per extra cycle while the estimated cycles stay within budget,
re-measuring the SQNR of the set after each addition, until the set reaches ``gain_share`` of
the all-int16 gain (strategy ``"up"``: an int8 model with int16 modules). Where that falls
short (a transformer's blocks gain only together: each alone in an int8 model gains next to
nothing), it chooses from the other end too (``choose_down``, strategy ``"down"``: an int16
model with int8 modules): what each candidate loses when it alone goes int8 in the all-int16
model, and candidates go int8 by that loss until the cycles fit; the better of the two choices
is kept. Either choice is shrunk to the budget the same way (``_fit_budget``): while the
estimate is over, the modules that cover the excess at the least SQNR loss, measured in the set
they leave, change precision, and a set is lowered (verification off: only Vela's estimate is
used) when its estimate fits. The table it decided from and the choice are returned (and
written to the report by the CLI's ``--precision auto``), so a user can keep the choice as
``EthosUNGQuantizer(spec, **advice.quantizer_args)``.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import asdict, dataclass, field
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import torch

from ethosu_ng.compile_spec import EthosUNGCompileSpec
from ethosu_ng.module_profile import at_depth

logger = logging.getLogger(__name__)

# A candidate set is modules at one depth of the module tree: the shallowest depth with at
# least this many modules that own NPU cycles (a transformer's blocks, a CNN's stages).
MIN_CANDIDATES = 6
MAX_DEPTH = 4


@dataclass
class ModuleRow:
    module: str
    sqnr_gain_db: float  # this module alone int16, over all-int8
    int8_cycles: float
    int16_cycles: float
    chosen: bool = False  # int16 in the choice
    # this module alone int8, under all-int16 (None: not measured)
    sqnr_loss_db: Optional[float] = None

    @property
    def extra_cycles(self) -> float:
        return self.int16_cycles - self.int8_cycles


@dataclass
class PrecisionAdvice:
    int8_sqnr_db: float
    int16_sqnr_db: float
    chosen_sqnr_db: float
    int8_cycles: float
    int16_cycles: float
    chosen_cycles: float
    gain_share: float
    cycle_budget: float
    depth: int
    rows: List[ModuleRow] = field(default_factory=list)
    # "up": chosen up from int8; "down": chosen down from int16 (the whole model, or where
    # candidates were given, the candidates in an int8 model); "int16": the whole model int16
    strategy: str = "up"
    # the model's activation dtype in the choice: "int8" (the chosen rows int16) or "int16"
    # (the rows not chosen int8); default: "int8" for "up", "int16" otherwise
    base: Optional[str] = None

    def __post_init__(self):
        if self.base is None:
            self.base = "int8" if self.strategy == "up" else "int16"

    @property
    def activation_dtype(self) -> torch.dtype:
        """The model's activation dtype in the choice; ``module_dtypes`` are the exceptions."""
        return torch.int8 if self.base == "int8" else torch.int16

    @property
    def module_dtypes(self) -> Dict[str, torch.dtype]:
        if self.base == "int8":
            return {r.module: torch.int16 for r in self.rows if r.chosen}
        return {r.module: torch.int8 for r in self.rows if not r.chosen}

    @property
    def quantizer_args(self) -> dict:
        """The choice as ``EthosUNGQuantizer`` / ``quantize`` keyword arguments."""
        return {"activation_dtype": self.activation_dtype, "module_dtypes": self.module_dtypes}

    @property
    def reached(self) -> bool:
        """The choice gives ``gain_share`` of the int16 gain within ``cycle_budget``."""
        full = self.int16_sqnr_db - self.int8_sqnr_db
        got = self.chosen_sqnr_db - self.int8_sqnr_db
        return got >= self.gain_share * full and (
            self.chosen_cycles <= self.cycle_budget * self.int8_cycles
        )

    def table(self) -> str:
        lines = [
            f"precision: int8 {self.int8_sqnr_db:.2f} dB {self.int8_cycles:,.0f} cycles; "
            f"int16 {self.int16_sqnr_db:.2f} dB {self.int16_cycles:,.0f} cycles; "
            f"chosen {self.chosen_sqnr_db:.2f} dB {self.chosen_cycles:,.0f} cycles "
            f"({self.chosen_cycles / max(self.int8_cycles, 1):.2f}x int8; goal "
            f"{self.gain_share:.0%} of the gain within {self.cycle_budget:.2f}x: "
            f"{'reached' if self.reached else 'not reached'})",
            {
                ("up", "int8"): "chosen up from int8: int16 modules in an int8 model",
                ("down", "int16"): "chosen down from int16: int8 modules in an int16 model",
                ("down", "int8"): "chosen down from the candidates in int16: int16 modules in "
                "an int8 model",
                ("int16", "int16"): "chosen: the whole model int16, within the budget",
            }[self.strategy, self.base],
            f"{'module':<32} {'gain dB':>8} {'loss dB':>8} {'int8 cycles':>12} "
            f"{'int16 cycles':>12}  int16",
        ]
        for r in sorted(self.rows, key=lambda r: -r.sqnr_gain_db):
            loss = "-" if r.sqnr_loss_db is None else f"{r.sqnr_loss_db:.2f}"
            lines.append(
                f"{r.module:<32} {r.sqnr_gain_db:>8.2f} {loss:>8} {r.int8_cycles:>12,.0f} "
                f"{r.int16_cycles:>12,.0f}  {'yes' if r.chosen else '-'}"
            )
        lines.append(f"to keep this choice: ethosu-ng compile ... {self.cli_args}")
        return "\n".join(lines)

    @property
    def cli_args(self) -> str:
        """The choice as ``ethosu-ng compile`` arguments."""
        flag = "--int16-module" if self.base == "int8" else "--int8-module"
        return " ".join([f"--precision {self.base}"] + [f"{flag} {m}" for m in self.module_dtypes])

    def as_dict(self) -> dict:
        d = asdict(self)
        d["activation_dtype"] = self.base
        other = "int16" if self.base == "int8" else "int8"
        d["module_dtypes"] = {k: other for k in sorted(self.module_dtypes)}
        d["reached"] = self.reached
        return d


def sqnr_db(got: Sequence[torch.Tensor], want: Sequence[torch.Tensor]) -> float:
    """10 log10(signal power / error power) over all outputs."""
    signal = sum(float(w.float().pow(2).sum()) for w in want)
    noise = sum(float((g.float() - w.float()).pow(2).sum()) for g, w in zip(got, want))
    return math.inf if noise == 0 else 10.0 * math.log10(signal / noise)


def batch_outputs(module, batches) -> List[torch.Tensor]:
    """Every output of ``module`` on every batch, in order (what ``sqnr_db`` compares)."""
    out = []
    with torch.no_grad():
        for batch in batches:
            y = module(*batch)
            out += list(y) if isinstance(y, (list, tuple)) else [y]
    return out


def _cycles_by_module(edge) -> Dict[str, float]:
    gm = edge.exported_program().graph_module
    cycles: Dict[str, float] = {}
    for child in gm.children():
        info = getattr(child, "meta", {}).get("_delegate_info_meta")
        for layer in getattr(info, "layers", None) or []:
            key = layer.get("module") or ""
            cycles[key] = cycles.get(key, 0.0) + float(layer.get("npu_cycles") or 0)
    return cycles


def _candidates(model: torch.nn.Module, cycles: Dict[str, float]) -> Tuple[int, List[str]]:
    names = {n for n, _ in model.named_modules() if n}
    for depth in range(1, MAX_DEPTH + 1):
        found = sorted({at_depth(m, depth) for m in cycles if m} & names)
        if len(found) >= MIN_CANDIDATES or depth == MAX_DEPTH:
            return depth, found
    return MAX_DEPTH, []


# Subsets searched exhaustively for the cheapest covers; above this, least loss per cycle first.
EXACT_COVER_ROWS = 16
# The cheapest covers by summed loss whose sets are measured (losses do not add up).
COVERS_MEASURED = 3


def _least_loss_covers(
    rows: List[ModuleRow], need: float, loss: Dict[str, float], count: int = 1
) -> List[List[ModuleRow]]:
    """Candidate sets of rows to unchoose, best first: the ``count`` subsets whose extra cycles
    add up to ``need`` with the least total ``loss`` (then the most cycles saved), each minimal
    (no row with a loss can leave it and the rest still cover) and with a different set of rows
    that lose something. Without such a subset, every row with extra cycles; without those, the
    one row that loses least."""

    def saved(r: ModuleRow) -> float:
        return max(r.extra_cycles, 0.0)

    def lost(r: ModuleRow) -> float:
        return max(loss.get(r.module, 0.0), 0.0)

    if not need > 0:
        raise ValueError(f"a cover of {need} cycles: there is nothing to cover")
    paying = [r for r in rows if saved(r) > 0]
    if sum(saved(r) for r in paying) < need:
        return [paying or [min(rows, key=lost)]]
    if len(paying) <= EXACT_COVER_ROWS:
        best: Dict[frozenset, Tuple[Tuple[float, float], List[ModuleRow]]] = {}
        for mask in range(1, 1 << len(paying)):
            subset = [r for k, r in enumerate(paying) if mask >> k & 1]
            cycles = sum(saved(r) for r in subset)
            if cycles < need or any(lost(r) > 0 and cycles - saved(r) >= need for r in subset):
                continue
            key = (sum(lost(r) for r in subset), -cycles)
            losing = frozenset(r.module for r in subset if lost(r) > 0)
            if losing not in best or key < best[losing][0]:
                best[losing] = (key, subset)
        return [subset for _, subset in sorted(best.values(), key=lambda kv: kv[0])[:count]]
    cover: List[ModuleRow] = []
    for r in sorted(paying, key=lambda r: lost(r) / saved(r)):
        if sum(saved(c) for c in cover) >= need:
            break
        cover.append(r)
    # a row the rest of the cover does without stays chosen (the costliest loss first)
    for r in sorted(cover, key=lambda r: -lost(r)):
        if sum(saved(c) for c in cover if c is not r) >= need:
            cover.remove(r)
    return [cover]


def _fit_budget(
    rows: List[ModuleRow],
    base_cycles: float,
    budget: float,
    measure_set,
    lower_set,
    say,
    empty: Callable[[], Tuple[float, float]],
    sqnr: Optional[float] = None,
    loss: Optional[Dict[str, float]] = None,
) -> Tuple[float, float]:
    """Shrink the chosen ``rows`` until their lowered cycles are within ``budget``; returns
    (the set's SQNR, its real cycles), ``empty()`` when the set empties.

    While the estimate (``base_cycles``, the cycles with no row chosen, plus the chosen rows'
    extras, scaled by what the last lowering showed: the int8 <-> int16 requantizations at a
    set's borders cost cycles no row holds) is over, the rows that cover the excess at the
    least SQNR loss leave (``_least_loss_covers``). A row's loss is measured in the set it
    leaves: the set's SQNR less the SQNR without it, because single-module figures do not add
    up (``sqnr`` and ``loss``: those figures for the starting set, where already measured); nor
    do losses, so the ``COVERS_MEASURED`` covers of least summed loss are compared by measuring
    the set each leaves. A lowering costs minutes: the set is lowered only when the estimate
    fits.
    """
    scale = 1.0
    while True:
        chosen = [r for r in rows if r.chosen]
        names = [r.module for r in chosen]
        if not chosen:
            return empty()
        extra = sum(max(r.extra_cycles, 0.0) for r in chosen)
        over = base_cycles + scale * extra - budget
        if over <= 0:
            cycles = lower_set(names)
            say(f"lowered {', '.join(names)}: {cycles:,.0f} cycles (budget {budget:,.0f})")
            if cycles <= budget:
                return (measure_set(names) if sqnr is None else sqnr), cycles
            if extra > 0:
                scale = (cycles - base_cycles) / extra
            over = cycles - budget
        if loss is None:
            # only a row that saves cycles can cover the excess (any row when none does)
            leaving = [r.module for r in chosen if r.extra_cycles > 0] or names
            sqnr = measure_set(names) if sqnr is None else sqnr
            loss = {m: sqnr - measure_set([n for n in names if n != m]) for m in leaving}
        covers = _least_loss_covers(chosen, over / scale, loss, COVERS_MEASURED)
        sqnr = None
        if len(covers) > 1:
            # summed single losses rank the covers; the sets they leave are measured
            left = [[n for n in names if n not in {r.module for r in c}] for c in covers]
            sqnr, dropped = max(zip(map(measure_set, left), covers), key=lambda sc: sc[0])
        else:
            dropped = covers[0]
        for r in dropped:
            r.chosen = False
        loss = None
        say(f"- {', '.join(r.module for r in dropped)}: {over:,.0f} cycles over {budget:,.0f}")


def choose(
    rows: List[ModuleRow],
    int8_sqnr: float,
    int16_sqnr: float,
    int8_cycles: float,
    gain_share: float,
    cycle_budget: float,
    measure_set,
    lower_set,
    say=lambda line: None,
) -> Tuple[float, float]:
    """Mark the chosen ``rows`` and return (their SQNR, their real cycles).

    Candidates with a gain go in by gain per extra cycle while the estimate (int8 cycles plus
    each chosen module's extra) stays within budget, the set's SQNR measured after each
    addition (gains do not add up: the int8 rest limits them), until ``gain_share`` of the
    int16 gain is reached. The set is then lowered and shrunk until its real cycles, which
    include the int8 <-> int16 requantizations at the set's borders, fit (``_fit_budget``).
    """
    budget = cycle_budget * int8_cycles
    goal = gain_share * (int16_sqnr - int8_sqnr)

    def ratio(r: ModuleRow) -> float:
        return r.sqnr_gain_db / max(r.extra_cycles, 1.0)

    sqnr, estimate = int8_sqnr, int8_cycles
    for r in sorted((r for r in rows if r.sqnr_gain_db > 0), key=lambda r: -ratio(r)):
        if sqnr - int8_sqnr >= goal:
            break
        if estimate + max(r.extra_cycles, 0.0) > budget:
            continue
        r.chosen = True
        estimate += max(r.extra_cycles, 0.0)
        sqnr = measure_set([x.module for x in rows if x.chosen])
        say(f"+ {r.module}: {sqnr:.2f} dB, about {estimate:,.0f} cycles")
    return _fit_budget(
        rows,
        int8_cycles,
        budget,
        measure_set,
        lower_set,
        say,
        lambda: (int8_sqnr, int8_cycles),
        sqnr,
    )


def choose_down(
    rows: List[ModuleRow],
    int8_sqnr: float,
    int8_cycles: float,
    cycle_budget: float,
    measure_set,
    lower_set,
    say=lambda line: None,
    base_cycles: Optional[float] = None,
    empty: Optional[Callable[[], Tuple[float, float]]] = None,
) -> Tuple[float, float]:
    """Mark the chosen ``rows`` and return (their SQNR, their real cycles), from the other end.

    Every candidate with a measured ``sqnr_loss_db`` starts int16 and leaves by the SQNR it
    loses (re-measured in each smaller set) until the cycles fit ``cycle_budget`` times
    ``int8_cycles`` (``_fit_budget``). ``base_cycles`` (default ``int8_cycles``): the cycles
    with every candidate int8, what ``measure_set``/``lower_set`` build around the chosen set;
    ``empty()`` (default int8's figures): that set's SQNR and cycles. Gains a transformer's
    blocks give only together (each alone in an int8 model gains nothing: the int8 rest keeps
    the error) show here.
    """
    for r in rows:
        r.chosen = r.sqnr_loss_db is not None
    loss = {r.module: r.sqnr_loss_db for r in rows if r.chosen}
    return _fit_budget(
        rows,
        int8_cycles if base_cycles is None else base_cycles,
        cycle_budget * int8_cycles,
        measure_set,
        lower_set,
        say,
        empty or (lambda: (int8_sqnr, int8_cycles)),
        loss=loss,
    )


def advise(
    model: torch.nn.Module,
    example_inputs: Tuple[torch.Tensor, ...],
    spec: EthosUNGCompileSpec,
    calibration: Optional[Iterable[Tuple[torch.Tensor, ...]]] = None,
    test_inputs: Optional[Sequence[Tuple[torch.Tensor, ...]]] = None,
    candidates: Optional[Sequence[str]] = None,
    gain_share: float = 0.9,
    cycle_budget: float = 1.25,
    log=None,
) -> PrecisionAdvice:
    """Choose each module's activation dtype (see the module docstring). ``test_inputs``: the
    batches SQNR is measured on (default: the calibration batches); ``candidates``: the only
    modules that may be int16, everything else int8 (default: one depth of the module tree, and
    the rest of the model follows the choice's base dtype: the whole model int16, or int8
    modules in an int16 model, are choices too); ``log``: a callable given progress lines
    (default: this module's logger)."""
    from ethosu_ng.export import lower, quantize

    if not 0 < gain_share <= 1:
        raise ValueError(f"gain_share must be in (0, 1], got {gain_share}")
    if cycle_budget < 1:
        raise ValueError(f"cycle_budget must be at least 1 (the int8 cycles), got {cycle_budget}")
    if candidates is not None:
        known = {n for n, _ in model.named_modules()}
        unknown = [c for c in candidates if c not in known]
        if unknown:
            raise ValueError(f"precision candidates {unknown} are not modules of the model")
    model = model.eval()
    calibration = list(calibration) if calibration is not None else [tuple(example_inputs)]
    tests = list(test_inputs) if test_inputs is not None else calibration
    want = batch_outputs(model, tests)
    say = log or logger.info  # the CLI prints this logger's lines

    def quantized(module_dtypes=None, activation_dtype=torch.int8) -> torch.nn.Module:
        return quantize(
            model,
            example_inputs,
            spec,
            calibration=calibration,
            activation_dtype=activation_dtype,
            module_dtypes=module_dtypes,
        )

    def measure(module_dtypes=None, activation_dtype=torch.int8) -> Tuple[float, torch.nn.Module]:
        q = quantized(module_dtypes, activation_dtype)
        return sqnr_db(batch_outputs(q, tests), want), q

    # Vela's estimate is all a lowering here is for: the program built from the choice is the
    # one verified (verification can move ops to the CPU; such a program's cycles differ).
    estimate_spec = dataclasses.replace(spec, verify_npu=False, verify_lowering=False)

    def cycles_of(q) -> Dict[str, float]:
        edge, _ = lower(q, example_inputs, estimate_spec)
        return _cycles_by_module(edge)

    s8, q8 = measure()
    c8 = cycles_of(q8)
    s16, q16 = measure(activation_dtype=torch.int16)
    c16 = cycles_of(q16)
    total8, total16 = sum(c8.values()), sum(c16.values())
    budget = cycle_budget * total8
    say(f"int8 {s8:.2f} dB {total8:,.0f} cycles, int16 {s16:.2f} dB {total16:,.0f} cycles")
    # given candidates, the rest of the model stays int8
    whole = candidates is None
    if whole and total16 <= budget and s16 >= s8:
        say(f"the whole model int16 fits the budget ({budget:,.0f} cycles)")
        return PrecisionAdvice(
            s8, s16, s16, total8, total16, total16, gain_share, cycle_budget, 0, [], "int16"
        )
    if candidates is None:
        depth, names = _candidates(model, c16)
    else:
        depth, names = 0, list(candidates)

    def module_cycles(cycles, name):
        return sum(v for m, v in cycles.items() if m == name or m.startswith(name + "."))

    rows = []
    for name in names:
        gain = measure({name: torch.int16})[0] - s8
        rows.append(ModuleRow(name, gain, module_cycles(c8, name), module_cycles(c16, name)))
        say(f"{name}: {gain:+.2f} dB, {rows[-1].extra_cycles:+,.0f} cycles")

    def quantize_set(chosen: Sequence[str], activation_dtype) -> Dict[str, torch.dtype]:
        """The quantizer's module dtypes for ``chosen`` int16 in a model of ``activation_dtype``."""
        if activation_dtype == torch.int8:
            return {m: torch.int16 for m in chosen}
        return {m: torch.int8 for m in names if m not in chosen}

    def measurer(activation_dtype):
        return lambda chosen: measure(quantize_set(chosen, activation_dtype), activation_dtype)[0]

    def lowerer(activation_dtype):
        def lower_set(chosen: Sequence[str]) -> float:
            q = quantized(quantize_set(chosen, activation_dtype), activation_dtype)
            return sum(cycles_of(q).values())

        return lower_set

    chosen_sqnr, chosen_cycles = choose(
        rows,
        s8,
        s16,
        total8,
        gain_share,
        cycle_budget,
        measurer(torch.int8),
        lowerer(torch.int8),
        say,
    )
    strategy = "up"
    base = "int8"
    if chosen_sqnr - s8 < gain_share * (s16 - s8):
        # Not reached from int8: choose from the all-int16 model too (no int8 <-> int16
        # borders but the ones the choice makes; given candidates, from all of them int16 in
        # the int8 model), by what each candidate loses alone in int8 there; the better
        # choice within budget is kept.
        up = [r.chosen for r in rows]
        down_dtype = torch.int16 if whole else torch.int8
        measure_down, lower_down = measurer(down_dtype), lowerer(down_dtype)
        top = s16 if whole else measure_down(names)
        for r in rows:
            r.sqnr_loss_db = top - measure_down([n for n in names if n != r.module])
            say(f"{r.module}: {r.sqnr_loss_db:+.2f} dB lost alone in int8")

        def all_int8() -> Tuple[float, float]:
            return measure_down([]), lower_down([])

        extra = sum(max(r.extra_cycles, 0.0) for r in rows)
        down_sqnr, down_cycles = choose_down(
            rows,
            s8,
            total8,
            cycle_budget,
            measure_down,
            lower_down,
            say,
            base_cycles=total16 - extra if whole else total8,
            empty=all_int8 if whole else None,
        )
        if down_sqnr > chosen_sqnr and down_cycles <= budget:
            chosen_sqnr, chosen_cycles, strategy = down_sqnr, down_cycles, "down"
            base = "int16" if whole else "int8"
        else:
            for r, was in zip(rows, up):
                r.chosen = was
    return PrecisionAdvice(
        s8,
        s16,
        chosen_sqnr,
        total8,
        total16,
        chosen_cycles,
        gain_share,
        cycle_budget,
        depth,
        rows,
        strategy,
        base,
    )
