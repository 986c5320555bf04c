"""Jumps on forms that are 0 in the limit: exact ties are step(0) = 0, ties only in the limit are refused."""

import numpy as np
import pytest

import netsor
from netsor.errors import NumericalError
from netsor.interpret.ties import jump_forms


def _gated_by_its_layernorm(sigma_b):
    """``b·1{σ_b·LN(b) > b}``: ``σ_b·LN(b) − b = b(σ_b/σ̂ − 1) + σ_b μ/σ̂`` is 0 in the limit only."""
    p = netsor.Program()
    n = p.dim("n")
    b = p.bias(n, sigma_b)
    p.readout(netsor.nonlin(lambda ln, v: np.where(sigma_b * ln > v, v, 0.0), netsor.layernorm(b), b, name="gated"))
    return p


def test_a_jump_on_a_tie_through_a_layernorm_is_refused_and_finite_networks_show_why():
    """The engine would say 0 (step(0) = 0 on the tied forms); wide networks say ≈ E b²/2: at widths 256 and
    1024 the networks' kernels (the output's variance given the hidden layer) are many standard errors above
    0 and do not shrink with the width."""
    p = _gated_by_its_layernorm(0.7)
    message = r"step\(0\.7\*\S+ \+ -1\*\S+\)\*\S+ jumps where 0\.7·\S+ − 1·\S+ = 0.*only in the limit"
    with pytest.raises(NumericalError, match=message):
        netsor.limit(p).nngp()
    for width in (256, 1024):
        k = netsor.run_finite(p, width=width, samples=200, seed=1, return_kernels=True).kernels[:, 0, 0]
        mean, se = np.mean(k), np.std(k, ddof=1) / np.sqrt(k.size)
        assert mean > 0.15 and mean > 10 * se  # E b² / 2 = 0.245 at every width


def test_a_jump_on_an_exact_tie_is_step_of_zero_in_the_limit_and_at_every_width():
    """``g·1{2g > g₂}`` with ``g₂ = 2g`` a linear combination with a constant coefficient: the form is 0 in every
    network, the step is 0, and the limit's kernel is exactly 0, as the finite networks' outputs are."""
    p = netsor.Program()
    n = p.dim("n")
    g = p.input(n)
    p.readout(netsor.nonlin(lambda u, v: np.where(2 * u > v, u, 0.0), g, 2.0 * g, name="exact tie"))
    X = np.random.default_rng(0).standard_normal((3, 4))
    K, E = netsor.limit(p, X).nngp(with_error=True)
    assert np.all(K == 0.0) and np.all(E == 0.0)
    assert np.all(netsor.sample(p, X, width=128, samples=3, seed=0) == 0.0)


@pytest.mark.parametrize("normalised", [True, False])
def test_a_step_between_a_preactivation_and_its_layernorm_is_refused_on_inputs_where_they_tie(normalised):
    """``step(g − LN(g))·g``: in the limit ``LN(g) = g/√K(x, x)``, the same vector where ``K(x, x) = 1`` (inputs
    of norm √d, σ = 1: common normalised data) — a tie of the limit only, refused there, naming the input;
    elsewhere an ordinary jump, whose kernel is that of ``relu`` or of ``−relu(−·)``: ``(1 − 1/√K) g`` is
    positive exactly where ``g`` is (K > 1) or ``−g`` is (K < 1)."""
    from references import pairwise, relu_kernel

    p = netsor.Program()
    n = p.dim("n")
    g = p.input(n, sigma=1.0)
    p.readout(netsor.nonlin(lambda u, v: np.where(u > v, u, 0.0), g, netsor.layernorm(g), name="g above LN(g)"))
    X = np.random.default_rng(1).standard_normal((4, 5))
    norms = np.array([1.0, 1.0, 0.5, 2.0]) if normalised else np.array([0.7, 1.3, 0.5, 2.0])
    X *= (norms * np.sqrt(5) / np.linalg.norm(X, axis=1))[:, None]
    if normalised:
        with pytest.raises(NumericalError, match=r"0 in the limit at X\[0\]"):
            netsor.limit(p, X).nngp()
        return
    K, E = netsor.limit(p, X).nngp(with_error=True)
    a, b, c = pairwise(X @ X.T / 5)
    sign = np.sign(norms - 1.0)
    ref = relu_kernel(a, b, np.outer(sign, sign) * c)  # E[relu(s_i g_i) relu(s_j g_j)] = E[g_i g_j 1{…}1{…}]·s_i s_j
    ref *= np.outer(sign, sign)
    assert np.all(np.abs(K - ref) <= E + 1e-14) and np.max(E) <= 1e-8 * np.max(np.abs(K))


def test_a_tie_inside_a_linear_combination_is_found_through_its_parts():
    """``step(h)·g`` with ``h = g − LN(g)`` a vector of its own: on inputs with ``K(x, x) = 1`` its limit variance is
    0 — measured against ``h`` itself that is no cancellation at all, against its parts ``g`` and ``LN(g)`` (each
    of variance 1) it is a tie. The engine said 0 ± 0; networks of width 1024 give ≈ 0.43 on the diagonal."""
    p = netsor.Program()
    n = p.dim("n")
    g = p.input(n, sigma=1.0)
    p.readout(netsor.step(g - netsor.layernorm(g)) * g)
    X = np.random.default_rng(1).standard_normal((3, 5))
    X *= np.sqrt(5) / np.linalg.norm(X, axis=1, keepdims=True)
    with pytest.raises(NumericalError, match=r"step\(g\d+\) jumps where 1·g\d+ = 0.*only in the limit"):
        netsor.limit(p, X).nngp()
    k = netsor.run_finite(p, X, width=1024, samples=100, seed=1, return_kernels=True).kernels[:, 0, 0]
    assert np.mean(k) > 10 * np.std(k, ddof=1) / np.sqrt(k.size)


def test_a_jump_of_a_matrix_times_a_vanishing_vector_is_refused_not_returned():
    """``step(W h)`` with ``h = g − LN(g)`` on inputs with ``K(x, x) = 1``: ``W h`` is not a tie of its parts (a
    MatMul output has none) but its limit variance is 0 by cancellation, and the correlations its step sees are
    0/0 in the limit (finite networks: a fresh random direction at every width). The engine has no finite bound
    there and says so, naming the cancellation among the causes, at every rtol."""
    p = netsor.Program()
    n = p.dim("n")
    g = p.input(n, sigma=1.0)
    p.readout(netsor.step(p.matrix(n, n) @ (g - netsor.layernorm(g))))
    X = np.random.default_rng(1).standard_normal((3, 5))
    X *= np.sqrt(5) / np.linalg.norm(X, axis=1, keepdims=True)
    for rtol in (1e-8, 1.0):
        with pytest.raises(NumericalError, match="no finite error bound.*limit variance is 0 by cancellation"):
            netsor.limit(p, X, rtol=rtol).nngp()


@pytest.mark.parametrize("eps, refusal", [(1e-9, "only in the limit"), (1e-7, "error bound reached")])
def test_a_jump_on_a_form_below_the_engines_resolution_is_refused_and_a_resolved_one_is_left_to_its_bound(eps, refusal):
    """``step(W erf(g) − W(erf(g) + ε g))``: the form is ``ε`` of its parts, genuinely, at every width. At ε = 1e-9 its
    limit variance is below the engine's resolution (1e-18 of its parts': rounding), the engine said ``0 ± 0``
    where the limit is ½, and one network of width 64 shows the form at 5e-10 — far above its computed limit —
    so it is refused as a tie. At ε = 1e-7 the form is resolved, its finite size matches its limit, and the tie
    check leaves it to the engine, whose propagated bound refuses the entries between inputs."""
    from scipy import special

    p = netsor.Program()
    n = p.dim("n")
    g, W = p.input(n), p.matrix(n, n)
    near = netsor.nonlin(lambda u: special.erf(u) + eps * u, g, name="erf + ε·id")
    p.readout(netsor.step(W @ netsor.erf(g) - W @ near))
    with pytest.raises(NumericalError, match=refusal):
        netsor.limit(p, np.random.default_rng(0).standard_normal((3, 4))).nngp()


def test_jump_forms_list_the_jumps_of_vectors_not_the_poles_of_scalars():
    """A LayerNorm's ``1/σ`` jumps at σ² = 0 (a scalar, not a vector of the program's coordinates); a
    ``where`` on two vectors jumps on their difference."""
    p = _gated_by_its_layernorm(0.5)
    forms = jump_forms(p)
    assert len(forms) == 1
    (line, (terms, offset)), = forms
    assert line is p.lines[-1] and offset == 0.0 and sorted(c for _, c in terms) == [-1.0, 0.5]


@pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisDeprecationWarning")  # the helper's assume()
def test_a_random_programs_tie_on_normalised_inputs_is_refused_and_the_unchecked_limit_is_wrong(monkeypatch):
    """A random program (``where(LN(g) > g, …)`` after an attention mix, found by the random-program tests
    on inputs of unit first-layer variance): the engine refuses it, and with the check switched off its
    kernel disagrees with networks of widths 1024 and 2048 (300 each, extrapolated in 1/n) beyond 4.5
    standard errors plus its bound — the check is what keeps a wrong limit from being returned."""
    import test_fuzz
    from strategies import Recipe, build, inputs

    from netsor.interpret import ties

    recipe = Recipe(sigmas=((0.8, 0.3), (0.8, 0.3)),
                    steps=(("layernorm", 559), ("traced", 284, 127, "where"), ("attention", 521, 281, 1.0),
                           ("matmul", 567, 0, 0.9)),
                    readouts=(((51, 204), 1.0, 0.0, False), ((0,), 1.0, 0.0, False)))
    X = inputs(3, 4, 11)
    X *= np.sqrt(4 * (1 - 0.3**2)) / 0.8 / np.linalg.norm(X, axis=1, keepdims=True)  # K(x, x) = 1
    p = build(recipe)
    with pytest.raises(NumericalError, match="only in the limit"):
        netsor.limit(p, X).nngp()
    monkeypatch.setattr(ties, "check_jump_ties", lambda *args, **kwargs: None)
    with pytest.raises(AssertionError):
        test_fuzz.assert_large_width_agrees_with_the_limit(p, X, 11)
