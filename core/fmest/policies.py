"""Policies: which of several answers to a quantity the engine returns.

Every estimation hook implementation may answer; a policy looks at the answers' provenance
(never at plugin order, which depends on installation) and picks one, saying which rule chose.
Ties break on the plugin name, so the choice never depends on install order.
"""

from __future__ import annotations

from typing import Any, Protocol, Sequence

from attrs import field, frozen

#: A rank for traced answers that applied parallelism the trace did not execute
#: (``Provenance.scaled``): such a trace is not validated (Megatron-DeepSpeed TP4/PP12 rows read
#: half the measured memory, issue 13), so hybrid ranks it below analytic; so does a trace of
#: eager kernels for a job whose stack fuses them (``Provenance.unfused_stack``, issue 12).
SCALED_TRACE = "traced (scaled)"

#: Preference order of bases for the hybrid policy (first wins).
HYBRID_ORDER = ("measured", "learned", "traced", "analytic", SCALED_TRACE, "quoted")


@frozen(kw_only=True)
class Failure:
    """A plugin that raised while answering."""

    plugin: str
    error: str


@frozen(kw_only=True)
class Decision:
    """A policy's choice for one quantity: the chosen answer (or ``None``), the rule that chose
    it, every candidate and every plugin failure."""

    quantity: str
    chosen: Any
    rule: str
    candidates: tuple[Any, ...] = ()
    failures: tuple[Failure, ...] = ()
    policy: str = ""
    notes: tuple[str, ...] = field(default=())


class Policy(Protocol):
    name: str
    description: str

    def choose(self, quantity: str, candidates: Sequence[Any]) -> Decision: ...

    # Optional: ``asks(basis) -> bool`` says whether the policy can choose answers of that
    # basis; the engine then asks only plugins that declared such a basis
    # (``fmest_register_estimators``). A policy without ``asks`` hears every plugin.


def _by_plugin(cands):
    return sorted(cands, key=lambda c: c.provenance.plugin)


def _rank(candidate, order) -> str:
    """The rank an answer takes in ``order``: its basis, or :data:`SCALED_TRACE` for a scaled
    trace when the order lists that rank (else a scaled trace ranks as traced)."""
    p = candidate.provenance
    if p.basis == "traced" and (p.scaled or getattr(p, "unfused_stack", None)) \
            and SCALED_TRACE in order:
        return SCALED_TRACE
    return p.basis


@frozen
class BasisPolicy:
    """Prefer answers by basis in a fixed order; the first basis present wins.

    ``learned`` answers count as learned only when in domain unless ``allow_out_of_domain``.
    An order that lists :data:`SCALED_TRACE` ranks scaled traces there, not with ``traced``.
    """

    name: str
    description: str
    order: tuple[str, ...]
    allow_out_of_domain: bool = False

    def asks(self, basis: str) -> bool:
        """Whether answers of ``basis`` can be chosen (the engine asks only such plugins)."""
        return basis in self.order

    def choose(self, quantity: str, candidates: Sequence[Any]) -> Decision:
        cands = _by_plugin(candidates)
        skipped: list[str] = []
        for basis in self.order:
            pool = [c for c in cands if _rank(c, self.order) == basis]
            if basis == "traced":
                skipped += [f"{c.provenance.plugin} ("
                            + (f"traced eager PyTorch, stack {c.provenance.unfused_stack} fuses "
                               "kernels" if getattr(c.provenance, "unfused_stack", None)
                               else "trace scaled, not executed")
                            + ": ranks below analytic)"
                            for c in cands if _rank(c, self.order) == SCALED_TRACE]
            if basis == "learned" and not self.allow_out_of_domain:
                outside = [c for c in pool if c.provenance.in_domain is False]
                skipped += [f"{c.provenance.plugin} (learned, outside its training domain)"
                            for c in outside]
                pool = [c for c in pool if c.provenance.in_domain is not False]
            if pool:
                rule = f"{self.name}: first basis present in order {' > '.join(self.order)} " \
                       f"is {basis!r}; chose {pool[0].provenance.plugin!r}"
                if len(pool) > 1:
                    rule += " (ties broken by plugin name)"
                if skipped:
                    rule += "; skipped " + ", ".join(skipped)
                return Decision(quantity=quantity, chosen=pool[0], rule=rule,
                                candidates=tuple(cands), policy=self.name)
        rule = f"{self.name}: no answer with basis in {', '.join(self.order)}"
        if skipped:
            rule += "; skipped " + ", ".join(skipped)
        return Decision(quantity=quantity, chosen=None, rule=rule, candidates=tuple(cands),
                        policy=self.name)


def builtin_policies() -> list[BasisPolicy]:
    """The shipped policies. ``learned`` and ``traced`` fall back to theory, saying so in the
    rule, rather than answering nothing."""
    return [
        BasisPolicy("theory", "analytic formulas only (quoted tables for prices)",
                    ("analytic", "quoted")),
        BasisPolicy("traced", "fake-tensor trace of the real code, else theory",
                    ("traced", "analytic", "quoted")),
        BasisPolicy("learned", "a learned model inside its training domain, else theory",
                    ("learned", "analytic", "quoted")),
        BasisPolicy("hybrid", "measured > in-domain learned > executed trace > theory > "
                    "scaled trace", HYBRID_ORDER),
    ]
