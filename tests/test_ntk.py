"""The NTK by gradient independence: against Neural Tangents, a textbook recursion and invariants."""

import json
from pathlib import Path

import numpy as np
import pytest
import references
from programs import weight_sharing
from scipy import special
from strategies import Recipe, build, inputs

import netsor
from netsor.errors import ProgramError
from netsor.ir.differentiate import differentiate
from netsor.ir.expr import Apply, Var, apply, linear, product

DATA = Path(__file__).parent / "data"
NT = np.load(DATA / "nt_reference_ntk.npz")
NT_KEYS = json.loads(str(NT["meta"]))["keys"]


def program_of(key):
    arch, act, depth, sw, sb = key.split("_")
    build = netsor.zoo.mlp if arch == "mlp" else netsor.zoo.resnet
    return build(int(depth[1:]), act, float(sw[1:]), float(sb[1:]))


@pytest.mark.parametrize("key", NT_KEYS)
def test_nngp_and_ntk_equal_neural_tangents(key):
    """NNGP, NTK and cross NTK within 1e-7 of Neural Tangents 0.6.5 (relative to the largest entry);
    the reported bounds cover the differences. ReLU NTKs take rtol = 1e-4: X has colinear and
    anti-colinear pairs, where the step kernel of relu' is only ½-Hölder in the correlation, so a
    rounding-level error of the input covariance is bounded by ~1e-8 per layer, compounding to
    ~2e-6 relative at depth 10 (the true errors are ~1e-15)."""
    p = program_of(key)
    rtol = 1e-4 if "relu" in key else 1e-8
    both = netsor.kernel(p, NT["X"], rtol=rtol)
    cross = netsor.kernel(p, NT["X"], NT["X2"], get="ntk", rtol=rtol)
    for mine, err, ref in [(both.nngp, both.nngp_error, NT[f"{key}/nngp"]),
                           (both.ntk, both.ntk_error, NT[f"{key}/ntk"]),
                           (cross.ntk, cross.ntk_error, NT[f"{key}/ntk_cross"])]:
        scale = np.max(np.abs(ref))
        assert np.max(np.abs(mine - ref)) <= 1e-7 * scale
        assert np.all(np.abs(mine - ref) <= err + 1e-13 * scale)  # NT's own rounding: ~1e-15
    assert np.array_equal(both.ntk, both.ntk.T)


def relu_ntk_recursion(X, depth, sw, sb):
    """Jacot et al.: Σ¹ = σw² xx'/d + σb², Θ¹ = Σ¹; Σˡ⁺¹ = σw² E[φφ'] + σb², Θˡ⁺¹ = Σˡ⁺¹ + σw² E[φ'φ'] Θˡ."""
    S = sw**2 * X @ X.T / X.shape[1] + sb**2
    T = S.copy()
    for _ in range(depth):
        d = np.sqrt(np.diag(S))
        cos = np.clip(S / np.outer(d, d), -1, 1)
        np.fill_diagonal(cos, 1.0)  # exactly: arccos near 1 would turn rounding into ~1e-8 errors
        th = np.arccos(cos)
        S_next = sw**2 * np.outer(d, d) * (np.sin(th) + (np.pi - th) * cos) / (2 * np.pi) + sb**2
        T = S_next + sw**2 * (np.pi - th) / (2 * np.pi) * T
        S = S_next
    return S, T


@pytest.mark.parametrize("depth", [1, 4])
def test_relu_mlp_ntk_equals_the_textbook_recursion(depth):
    X = np.random.default_rng(3).standard_normal((12, 7))
    S, T = relu_ntk_recursion(X, depth, 1.4, 0.1)
    k = netsor.kernel(netsor.zoo.mlp(depth, "relu", 1.4, 0.1), X)
    assert np.max(np.abs(k.nngp - S) / np.abs(S).max()) < 1e-13
    assert np.max(np.abs(k.ntk - T) / np.abs(T).max()) < 1e-13
    assert np.allclose(netsor.ntk(netsor.zoo.mlp(depth, "relu", 1.4, 0.1), X), k.ntk, rtol=0, atol=0)


def relu_recursion_long_double(X, depth, sw, sb):
    """The textbook recursion in extended precision (x87 long double, 64-bit mantissa where the
    platform has it): a reference ~1000× more accurate than float64."""
    X, sw, sb = X.astype(np.longdouble), np.longdouble(sw), np.longdouble(sb)
    pi = np.arccos(np.longdouble(-1))
    S = sw**2 * X @ X.T / X.shape[1] + sb**2
    T = S.copy()
    for _ in range(depth):
        d = np.sqrt(np.diag(S))
        cos = np.clip(S / np.outer(d, d), -1, 1)
        np.fill_diagonal(cos, 1)
        th = np.arccos(cos)
        S_next = sw**2 * np.outer(d, d) * (np.sin(th) + (pi - th) * cos) / (2 * pi) + sb**2
        T = S_next + sw**2 * (pi - th) / (2 * pi) * T
        S = S_next
    return S.astype(float), T.astype(float)


def test_deep_relu_kernels_meet_the_default_tolerance_with_bounds_that_hold():
    """Depth 20: the bounds cover the true errors (against extended precision) and stay near
    rounding. Per-point variances of relu² propagate their error exactly (a^{p/2} scaling) and the
    step kernel's by its modulus of continuity; the general Cauchy–Schwarz factors compounded
    ~2.5× per layer (bound 8e-7 at depth 20, refused at the default rtol)."""
    X = np.random.default_rng(5).standard_normal((40, 6))
    S, T = relu_recursion_long_double(X, 20, 1.4, 0.1)
    k = netsor.kernel(netsor.zoo.mlp(20, "relu", 1.4, 0.1), X)
    for K, E, ref in ((k.nngp, k.nngp_error, S), (k.ntk, k.ntk_error, T)):
        scale = np.sqrt(np.outer(np.diag(ref), np.diag(ref)))
        assert np.all(np.abs(K - ref) <= E)
        assert np.max(E / scale) < 1e-10


def test_ntk_memory_is_the_kernels_not_every_second_moment():
    """The NTK combines each tile's second moments as they are computed: its peak memory is the
    kernels and their bounds (four B² arrays; the bounds' scales are checked tile by tile, never
    stored: six arrays before) and the tile budget, not one B² array and bound per second moment
    (13 moments here: 35 B² arrays before)."""
    import tracemalloc

    n, budget = 600, 2**22
    X = np.random.default_rng(0).standard_normal((n, 20))
    p = netsor.zoo.mlp(6, "relu", 1.0, 0.1)
    netsor.kernel(p, X[:5])  # derived programs and plans are cached: not part of the peak
    tracemalloc.start()
    try:
        netsor.kernel(p, X, memory_budget=budget)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak <= 5 * 8 * n * n + 2 * budget


@pytest.mark.parametrize("program", [netsor.zoo.rnn(3, "tanh", 1.1, 0.9, 0.2), weight_sharing().p,
                                     netsor.zoo.resnet(2, "erf", 0.9, 0.1)], ids=["rnn", "shared", "resnet"])
def test_ntk_minus_nngp_is_psd_and_the_nngp_agrees_with_nngp(program):
    """Θ − K is a sum of Gram matrices of gradients (PSD); the NNGP part agrees with netsor.nngp."""
    rng = np.random.default_rng(4)
    X = rng.standard_normal((5, program.steps, 3)) if program.steps else rng.standard_normal((6, 3))
    k = netsor.kernel(program, X, rtol=1e-6)
    K, E = netsor.limit(program, X, rtol=1e-6).nngp(with_error=True)
    assert np.all(np.abs(k.nngp - K) <= k.nngp_error + E)  # two programs, each within its bounds
    eig = np.linalg.eigvalsh(k.ntk - k.nngp)
    assert eig[0] >= -1e-9 * eig[-1]
    assert eig[-1] > 0


@pytest.mark.parametrize("program", [netsor.zoo.rnn(2, "tanh", 1.1, 0.9, 0.2), weight_sharing().p,
                                     netsor.zoo.mlp(3, "relu", 1.2, 0.1)], ids=["rnn", "shared", "mlp"])
def test_kernels_of_one_input_set_equal_the_cross_kernels_tile_by_tile(program):
    """For one input set only tiles on and above the diagonal are computed: those below are their
    transposes, diagonal tiles are mirrored from their upper triangles. Small tiles (the smallest
    memory budget: several tiles a side; several outputs per input for the RNN) against the cross
    kernel of X with a copy of itself, whose every tile is computed (and whose identical pairs take
    per-point values)."""
    rng = np.random.default_rng(8)
    X = rng.standard_normal((80, program.steps, 2)) if program.steps else rng.standard_normal((80, 3))
    options = {"rtol": 1e-6, "memory_budget": 2**20, "threads": 2}
    k = netsor.kernel(program, X, **options)
    k2 = netsor.kernel(program, X, X.copy(), **options)
    for name in ("nngp", "ntk"):
        K, E, K2, E2 = (getattr(k, name), getattr(k, f"{name}_error"), getattr(k2, name), getattr(k2, f"{name}_error"))
        np.testing.assert_array_equal(K, K.T)
        assert np.all(np.abs(K - K2) <= E + E2)


def test_repeated_inputs_are_checked_at_their_per_point_values():
    """Entries of identical inputs take per-point values (exact at colinearity) after the blocks are
    swept; the tolerance is checked on those values, not on the blocks' generic ones (a step
    kernel at correlation 1, whose bound is ½-Hölder): a cross kernel whose X2 repeats X's rows
    meets the default rtol and equals the kernel of X itself, reordered."""
    X = np.random.default_rng(1).standard_normal((20, 3, 4))
    p = netsor.zoo.rnn(3, "step")
    k = netsor.kernel(p, X)
    order = np.arange(20 * 3).reshape(20, 3)[::-1].ravel()  # X2 = X[::-1], outputs indexed b·T + t
    k2 = netsor.kernel(p, X, X[::-1])
    for name in ("nngp", "ntk"):
        K, E = getattr(k, name), getattr(k, f"{name}_error")
        K2, E2 = getattr(k2, name), getattr(k2, f"{name}_error")
        assert np.all(np.abs(K2 - K[:, order]) <= E2 + E[:, order])


def test_rnn_ntk_of_independent_readouts_is_block_diagonal():
    p = netsor.Program()
    n = p.dim("n")
    h = netsor.relu(p.input(n, sigma=1.2))
    p.readout(h, sigma=1.0)
    p.readout(netsor.tanh(p.matrix(n, n, 1.1) @ h), sigma=1.0)
    X = np.random.default_rng(5).standard_normal((4, 3))
    T = netsor.ntk(p, X).reshape(4, 2, 4, 2)
    assert np.all(T[:, 0, :, 1] == 0) and np.all(T[:, 1, :, 0] == 0)
    assert np.all(np.diag(T[:, 1, :, 1]) > np.diag(netsor.nngp(p, X).reshape(4, 2, 4, 2)[:, 1, :, 1]))


# ---- symbolic derivatives -------------------------------------------------------------------------
def _vectors():
    p = netsor.Program()
    n = p.dim("n")
    return p.input(n), p.input(n)


@pytest.mark.parametrize("name", ["relu", "erf", "tanh", "abs", "hard_tanh", "sin", "cos", "exp", "gaussian",
                                  "leaky_relu", "gelu", "elu", "softplus", "step", "identity"])
def test_symbolic_derivatives_equal_numerical_ones(name):
    """∂/∂u of act(1.3u − 0.4v + 0.2)·tanh(v) + u², symbolically, at points away from kinks."""
    u, v = _vectors()
    act = netsor.activation(name)
    inner = linear(0.2, [(1.3, Var(u)), (-0.4, Var(v))])
    e = linear(0.0, [(1.0, product([apply(act, inner), Apply(netsor.tanh, Var(v))])),
                     (1.0, product([Var(u), Var(u)]))])
    rng = np.random.default_rng(6)
    values = {u: rng.uniform(-2, 2, 400), v: rng.uniform(-2, 2, 400)}
    x = inner.evaluate(values)
    away = np.min(np.abs(x[:, None] - np.array([0.0, -1.0, 1.0])[None, :]), axis=1) > 1e-3
    for wrt in (u, v):
        symbolic = differentiate(e, wrt).evaluate(values)
        numeric = e.derivative(values, wrt)
        assert np.allclose(symbolic[away], numeric[away], rtol=1e-6, atol=1e-8)


def test_opaque_functions_are_differentiated_by_central_differences():
    u, v = _vectors()
    w = netsor.nonlin(lambda a, b: np.tanh(a) * np.sin(b), u, v)
    e = u.program.line_of(w).expr
    values = {u: np.linspace(-1, 1, 9), v: np.linspace(0.5, -2, 9)}
    assert np.allclose(differentiate(e, u).evaluate(values), np.sin(values[v]) / np.cosh(values[u]) ** 2, atol=1e-8)


@pytest.mark.parametrize("act", ["relu", "tanh"])
def test_exact_ntk_of_a_nonlinear_transposed_program_that_reads_data(act):
    """``y = vᵀ Wᵀ φ(W g)/√n``, ``g = U x``: the forward pass uses Wᵀ, so the NTK takes the real
    transposes, whose Netsor⊤ corrections ``E[∂φ(Z^{Wg}_i)]`` differ at every input (per-input
    scalars of the limit). The engine's NNGP and NTK agree with the joint QMC simulation (the other
    interpreter: Stein's lemma on simulated copies) within the simulation's bounds, with bounds of
    their own below 1e-8; gradient independence differs from both by more than the bounds."""
    p = netsor.Program()
    n = p.dim("n")
    W = p.matrix(n, n, sigma=1.2)
    p.readout(W.T @ getattr(netsor, act)(W @ p.input(n)))
    X = np.random.default_rng(0).standard_normal((3, 3)) * [[0.6], [1.0], [1.4]]
    k = netsor.kernel(p, X)
    s = netsor.kernel(p, X, method="qmc", rtol=3e-3)
    for engine, bound, simulated, sim_bound in ((k.nngp, k.nngp_error, s.nngp, s.nngp_error),
                                                (k.ntk, k.ntk_error, s.ntk, s.ntk_error)):
        scale = np.sqrt(np.outer(np.diag(engine), np.diag(engine)))
        assert np.all(np.abs(engine - simulated) <= sim_bound + bound)
        assert np.max(bound / scale) <= 1e-8
    independent = netsor.kernel(p, X, backward="independent").ntk
    assert np.max(np.abs(independent - k.ntk) - s.ntk_error - k.ntk_error) > 0


# ---- bad input ------------------------------------------------------------------------------------
def test_ntk_bad_input_says_what_to_change():
    X = np.eye(3)
    p = netsor.Program()
    p.input(p.dim("n"))
    with pytest.raises(ProgramError, match="no outputs"):
        netsor.ntk(p, X)
    with pytest.raises(netsor.NetsorError, match="get"):
        netsor.kernel(netsor.zoo.mlp(1), X, get="ntkk")
    with pytest.raises(ProgramError, match="Program"):
        netsor.ntk("mlp", X)


def test_a_kink_at_a_vector_that_vanishes_in_the_limit_has_a_finite_ntk_bound():
    """``h = |g − s·g|/2`` with the scalar ``s = exp(2θ)·exp(2θ)⁻¹ = 1`` (found by the fuzz test,
    seed 6061): h and its gradient vanish in the limit, but the step kernel of |·|' at a form of zero
    variance had a NaN bound and the NTK was refused ("no finite error bound"). Cauchy–Schwarz bounds
    such a moment by its envelope: the NTK is 0, like the NNGP, with bound 0."""
    recipe = Recipe(sigmas=((0.8, 0.0),), steps=(("attention", 0, 0, 0.5), ("traced", 0, 1, "abs-diff")),
                    readouts=(((2,), 1.0, 0.0, False),))
    k = netsor.kernel(build(recipe), inputs(2, 4, 0))
    assert np.all(k.ntk == 0) and np.all(k.ntk_error == 0) and np.all(k.nngp == 0)


def test_block_ratio_bound_is_at_least_every_entrys_ratio():
    """The check of a kernel block without a pass over it (``_Block.ratio_bound``, the mediant of the
    terms' relative bounds) is never below the largest ratio of the block's bound to its scale, and
    is exact when one term dominates; with a dense bound in a term it defers to the pass (inf)."""
    from netsor.interpret.ntk import Moment, _Block

    rng = np.random.default_rng(3)
    n = 30

    def moment(eta, dense=None):
        left, right = rng.uniform(0.1, 2.0, (n, 1)), rng.uniform(0.1, 2.0, (1, n))
        return Moment(rng.uniform(-1, 1, (n, n)) * left * right, left, right, eta, dense)

    for _ in range(20):
        block = _Block(rng.uniform(0, 1), np.empty((n, n)))
        etas = 10.0 ** rng.uniform(-14, -4, 4)
        block.add(rng.uniform(0.1, 3.0), moment(etas[0]), None)
        block.add(rng.uniform(0.1, 3.0), moment(etas[1]), moment(etas[2]))
        block.add(1.0, moment(etas[3]), None)
        exact = float(np.max(block.error() / block.scale()))
        assert block.ratio_bound() >= exact
        assert block.ratio_bound() <= 1.01 * max(etas[3], etas[2] + etas[1] + etas[1] * etas[2], etas[0])
    single = _Block(0.0, np.empty((n, n)))
    single.add(2.0, moment(1e-6), None)
    assert single.ratio_bound() == pytest.approx(float(np.max(single.error() / single.scale())), rel=1e-12)
    dense = _Block(0.0, np.empty((n, n)))
    dense.add(1.0, moment(0.0, dense=np.full((n, n), 1e-3)), moment(1e-8))
    assert dense.ratio_bound() == np.inf


def test_the_ntk_of_gelu_at_exploding_variance_meets_the_default_rtol():
    """gelu at σ_w = 3 (variances ×4.5 a layer, ~10⁸ by depth 12): the bound of the NTK's E[gelu'(u) gelu'(v)]
    pairs grew ~2.7× a layer through the per-point slope √(E gelu''² E gelu''²) ~ a^{−1/2}, while the pairs' own
    slope E[gelu'' gelu''] ~ 1/(2π√(ab − c²)) is a^{−1/2} smaller: refused at 1.17e-8. With gelu'' in closed form
    (``Activation.second``) the pairs of gelu' bound their change by that slope (``Run._slope_modulus``)."""
    X = np.random.default_rng(0).standard_normal((3, 4))
    k = netsor.kernel(netsor.zoo.mlp(12, "gelu", 3.0, 0.1), X)
    root = np.sqrt(np.diag(k.ntk))
    assert np.max(k.ntk_error / np.outer(root, root)) < 1e-8


def _elu_by_panels(panels):
    """``expectations`` of ``references.mlp_kernels`` for elu: the inner integrals in closed form, the outer one by
    Gauss–Legendre panels split at the kink (``references.pair_by_panels``)."""
    return lambda a, b, rho: tuple(references.pair_by_panels(f, smoothed, (0.0,), a, b, rho, panels) for f, smoothed
                                   in ((references.elu, references.elu_mean),
                                       (references.elu_slope, references.elu_slope_mean)))


def _gelu_slope(x):
    return special.ndtr(x) + x * np.exp(-x * x / 2) / np.sqrt(2 * np.pi)


#: Per activation: the references' ``expectations`` at a resolution, and two resolutions.
_REFERENCES = {"softplus": (lambda step: references.trapezoid_expectations(lambda x: np.logaddexp(0.0, x),
                                                                           special.expit, step), (0.05, 0.04)),
               "gelu": (lambda step: references.trapezoid_expectations(lambda x: x * special.ndtr(x), _gelu_slope,
                                                                       step), (0.05, 0.04)),
               "elu": (_elu_by_panels, (240, 160))}


@pytest.mark.parametrize("name, depth", [("softplus", 20), ("gelu", 30), ("elu", 20)])
def test_deep_ordered_networks_of_relu_like_activations_meet_the_default_rtol(name, depth):
    """σ_w = 1.5, σ_b = 0.1: variances grow to ~100 and every pair's correlation towards 1 (1 − ρ from 1e-11 to
    0.08), where the Mehler series of φ and φ' need orders beyond 255 and the nearly colinear pairs a nested 2-D
    rule: the NNGP + NTK took 25–56 s (gelu, depth 30) and 4.5 minutes (softplus, depth 20) on 40 inputs; now the
    order-767 tables and the nested rule's Gauss–Hermite inner rules take them in about a second (elu: 16 s, its
    points with themselves on a tile a hair off colinear at the corners of their closed forms' change, → 1 s).
    Against Jacot's recursion by the trapezoid rule (elu: by panels, the inner integrals in closed form), at two
    resolutions (their difference bounds its error), the bounds cover the true error at every entry and meet
    the default rtol."""
    X = np.random.default_rng(1).standard_normal((4, 8))
    reference, resolutions = _REFERENCES[name]
    k = netsor.kernel(netsor.zoo.mlp(depth, name, 1.5, 0.1), X)
    refs = [references.mlp_kernels(X, depth, 1.5, 0.1, reference(r)) for r in resolutions]
    for got, err, ref, other in ((k.nngp, k.nngp_error, refs[0][0], refs[1][0]),
                                 (k.ntk, k.ntk_error, refs[0][1], refs[1][1])):
        # per entry: gelu's variances fall into two basins (its slope ½ at 0, 1 on the right), 0.02 to 130 here
        scale = np.sqrt(np.outer(np.diag(ref), np.diag(ref)))
        ref_error = 10 * np.abs(ref - other) + 1e-14 * scale
        assert np.max(ref_error / scale) < 1e-11
        assert np.all(np.abs(got - ref) <= err + ref_error)
        assert np.max(err / scale) < 1e-8


@pytest.mark.parametrize("depth, sigma_w, sigma_b, alpha", [
    (50, 1.0, 0.1, 0.0),  # ordered: every correlation within ~1e-15 of 1
    (100, 1.2, 1.0, 0.0),
    (30, 1.5, 0.2, 0.0),  # chaotic: the nearly identical pair's 1 − ρ grows from ~1e-13 with depth
    (50, 1.0, 0.1, 0.1),  # leaky_relu, ordered
    (50, 1.0, 0.1, -1.0),  # abs: its derivative 2·step − 1 was four terms whose bounds added up, 5× a layer (1e23)
])
def test_deep_relu_networks_whose_correlations_approach_one_meet_the_default_rtol_with_bounds_that_cover_the_error(
        depth, sigma_w, sigma_b, alpha):
    """Networks that drive two inputs' correlation to within rounding of 1 (the ordered phase), or inputs a
    perturbation apart: the NTK's step kernel is ½-Hölder there, and the covariances' rounding-level bound on
    each correlation cost its square root a layer (refused at the default rtol, bounds ~1e-7 while the true
    error was ~1e-10). The distances between the points, carried with their relative accuracy, meet the
    default rtol, with bounds that cover the true error (against a 40-digit recursion) at every entry."""
    X = np.random.default_rng(1).standard_normal((6, 10))
    X[4] = X[3] + 1e-6 * X[0]
    act = {0.0: "relu", -1.0: "abs"}.get(alpha) or netsor.activations.activation("leaky_relu", alpha=alpha)
    k = netsor.kernel(netsor.zoo.mlp(depth, act, sigma_w, sigma_b), X)
    K, T = references.relu_mlp_kernels_by_mpmath(X, depth, sigma_w, sigma_b, alpha=alpha)
    for got, err, ref in ((k.nngp, k.nngp_error, K), (k.ntk, k.ntk_error, T)):
        assert np.all(np.abs(got - ref) <= err)
        assert np.max(err / np.sqrt(np.outer(np.diag(ref), np.diag(ref)))) < 1e-8


def _leaky_by_a_sum(depth: int, written: str) -> netsor.Program:
    """A leaky ReLU MLP (σ_w = 1, σ_b = 0.1), its φ(g) written as one activation 1.01·leaky_relu(g, 0.01/1.01)
    ("one"), as the sum relu(g) + 0.01·g (two terms, "sum"), or that sum with the matrix applied to each term,
    ``W relu(g) + W (0.01 g)`` ("shared": two sources of one matrix, correlated)."""
    p = netsor.Program("leaky")
    n = p.dim("n")
    leaky = netsor.activations.activation("leaky_relu", alpha=0.01 / 1.01)
    relu = netsor.activations.relu

    def phi(g):
        return 1.01 * leaky(g) if written == "one" else relu(g) + 0.01 * g

    g = p.input(n, sigma=1.0, bias=0.1)
    for _ in range(depth - 1):
        W = p.matrix(n, n, sigma=1.0)
        g = (W @ relu(g) + W @ (0.01 * g) if written == "shared" else W @ phi(g)) + p.bias(n, 0.1)
    p.readout(phi(g), sigma=1.0, bias=0.1)
    return p


def test_an_ordered_network_whose_activation_is_a_sum_of_kinked_and_linear_terms_meets_the_default_rtol():
    """φ(g) = relu(g) + 0.01·g written as that sum (the engine combines the terms into one piecewise-linear
    function of g and carries the distances through it; refused at the default rtol before, bound 1.8e-7) equals
    the network written with one activation within the two bounds, at depth 100 where every correlation is within
    rounding of 1, and both meet the default rtol."""
    X = np.random.default_rng(1).standard_normal((6, 10))
    by_sum = netsor.kernel(_leaky_by_a_sum(100, "sum"), X)
    by_one = netsor.kernel(_leaky_by_a_sum(100, "one"), X)
    for a, ea, b, eb in ((by_sum.nngp, by_sum.nngp_error, by_one.nngp, by_one.nngp_error),
                         (by_sum.ntk, by_sum.ntk_error, by_one.ntk, by_one.ntk_error)):
        assert np.all(np.abs(a - b) <= ea + eb)
        assert np.max(ea / np.sqrt(np.outer(np.diag(b), np.diag(b)))) < 1e-8


@pytest.mark.parametrize(("activation", "alpha"), [("relu", 0.0), ("leaky_relu", 0.1)])
def test_bias_free_mlps_at_nearly_proportional_inputs_carry_the_angle_through_the_layers(activation, alpha) -> None:
    """Bias-free MLPs (depth 6) on ``x``, ``2x + 1e-9·ε`` and ``3x``: two points of different norms at a tiny angle,
    where the distance form of the angle cancels to ½-Hölder (NTK bounds 3.7e-8 at depth 2 … 5.9e-7 at depth 10,
    refused at the default rtol). The first layer's angle comes from the inputs' directions, each later one from the
    angle map of the homogeneous layer below (``distance_kernels.piecewise_linear_angle``); against the 40-digit
    recursion the bounds cover the true errors and meet the default rtol."""
    rng = np.random.default_rng(18)
    X = rng.standard_normal((3, 5))
    X[1] = 2.0 * X[0] + 1e-9 * rng.standard_normal(5)
    X[2] = 3.0 * X[0]
    act = netsor.activation("leaky_relu", alpha=alpha) if alpha else activation
    k = netsor.kernel(netsor.zoo.mlp(6, act, 1.0, 0.0), X)
    K, T = references.relu_mlp_kernels_by_mpmath(X, 6, 1.0, 0.0, alpha=alpha)
    for got, err, ref in ((k.nngp, k.nngp_error, K), (k.ntk, k.ntk_error, T)):
        assert np.all(np.abs(got - ref) <= err)
        assert np.max(err / np.sqrt(np.outer(np.diag(ref), np.diag(ref)))) < 1e-8


def test_an_ordered_network_the_distances_cannot_be_carried_through_is_refused_with_the_reason():
    """The same network with the matrix applied to each term (two correlated sources of one matrix, which the
    distances are not carried through): the covariances alone carry its correlations, within rounding of 1 at
    depth 100 — refused at the default rtol, saying why and what the engine carries distances through; at rtol
    1e-6 it agrees with the network written with one activation within the two bounds."""
    X = np.random.default_rng(1).standard_normal((6, 10))
    with pytest.raises(netsor.NumericalError, match="ordered phase.*½-Hölder.*carries 1 − ρ.*sharing a matrix"):
        netsor.kernel(_leaky_by_a_sum(100, "shared"), X)
    shared = netsor.kernel(_leaky_by_a_sum(100, "shared"), X, rtol=1e-6)
    by_one = netsor.kernel(_leaky_by_a_sum(100, "one"), X)
    for a, ea, b, eb in ((shared.nngp, shared.nngp_error, by_one.nngp, by_one.nngp_error),
                         (shared.ntk, shared.ntk_error, by_one.ntk, by_one.ntk_error)):
        assert np.all(np.abs(a - b) <= ea + eb)


@pytest.mark.parametrize(("fn", "name"), [(np.tanh, "tanh"), (special.erf, "erf"), (np.sin, "sin"),
                                          (lambda x: np.maximum(x, 0.0), "relu"),
                                          (lambda x: np.logaddexp(0.0, x), "softplus")])
def test_a_custom_activation_written_with_numpy_is_traced_so_the_ntk_has_its_exact_derivative(fn, name):
    """An activation given as a plain numpy callable (``mlp(2, np.tanh)``) was an opaque function whose
    derivative, for the NTK, is a central finite difference: its rounding noise (~1e-10) showed as a kink
    on every panel and every such NTK was refused. Applied to a vector it is now traced, so it is the
    registry's function with its own derivative: NNGP and NTK equal those of the activation by name."""
    X = np.random.default_rng(4).standard_normal((4, 3))
    traced = netsor.kernel(netsor.zoo.mlp(2, fn, sigma_b=0.1), X)
    named = netsor.kernel(netsor.zoo.mlp(2, name, sigma_b=0.1), X)
    for got, ref in ((traced.nngp, named.nngp), (traced.ntk, named.ntk)):
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=0.0)


def test_a_traced_activation_with_an_offset_kink_has_the_ntk_of_its_declared_derivative():
    """``relu(x + 0.3)`` written with np.maximum (traced: a relu of a shifted argument, derivative a step)
    against the same function declared opaque with its derivative and kink given by hand (the opaque
    quadrature with a declared kink): NTKs within the two reported bounds, both below 1e-8 of the scale."""
    X = np.random.default_rng(5).standard_normal((4, 3))
    shifted = netsor.activation(lambda x: np.maximum(np.asarray(x) + 0.3, 0.0), kinks=(-0.3,),
                                deriv=lambda x: (np.asarray(x) > -0.3).astype(float))
    traced = netsor.kernel(netsor.zoo.mlp(2, lambda x: np.maximum(x + 0.3, 0.0)), X)
    declared = netsor.kernel(netsor.zoo.mlp(2, shifted), X)
    scale = np.sqrt(np.outer(np.diag(declared.ntk), np.diag(declared.ntk)))
    assert np.all(np.abs(traced.ntk - declared.ntk) <= traced.ntk_error + declared.ntk_error)
    assert np.max(traced.ntk_error / scale) <= 1e-8 and np.max(declared.ntk_error / scale) <= 1e-8


@pytest.mark.parametrize(("name", "separation"), [
    ("relu + 0.1 tanh", 1e-3), pytest.param("relu + 0.1 tanh", 1e-4, marks=pytest.mark.slow),
    pytest.param("clip + 0.1 tanh", 1e-3, marks=pytest.mark.slow)])
def test_the_ntk_of_a_kinked_plus_smooth_activation_at_inputs_a_little_apart_meets_the_default_rtol(name, separation):
    """``relu(x) + 0.1 tanh(x)`` (traced): its derivative ``step + 0.1 tanh'`` jumps and its pair has no closed form,
    so the change of that pair over its covariance's bound was the χ² bound, ``1/(1 − ρ)``: the NTK of inputs 1e-3
    apart was refused (3.4e-7 relative), 1e-4 apart 3.4e-5. The change itself along the box's axes (its true slope
    grows as 1/sin θ only) meets rtol, with bounds that cover the error against nested quadrature."""
    fn, deriv, kinks = {
        "relu + 0.1 tanh": (lambda x: np.maximum(x, 0.0) + 0.1 * np.tanh(x),
                            lambda x: (np.asarray(x) > 0.0) + 0.1 / np.cosh(x) ** 2, (0.0,)),
        "clip + 0.1 tanh": (lambda x: np.clip(x, -1.0, 1.0) + 0.1 * np.tanh(x),
                            lambda x: (np.abs(x) < 1.0) + 0.1 / np.cosh(x) ** 2, (-1.0, 1.0))}[name]
    rng = np.random.default_rng(5)
    x0 = rng.standard_normal(4)
    X = np.stack([x0, x0 + separation * rng.standard_normal(4)])
    K, T = references.piecewise_mlp_kernels(fn, deriv, kinks, X, depth=3, sigma_w=1.5, sigma_b=0.3)
    k = netsor.kernel(netsor.zoo.mlp(3, fn, 1.5, 0.3), X)
    for got, err, ref in ((k.nngp, k.nngp_error, K), (k.ntk, k.ntk_error, T)):
        assert np.all(np.abs(got - ref) <= err)
        assert np.max(err / np.sqrt(np.outer(np.diag(ref), np.diag(ref)))) < 1e-8


@pytest.mark.parametrize("separation", [1e-2, 1e-3])
def test_the_nngp_of_an_opaque_activation_with_a_jump_at_inputs_a_little_apart_meets_the_default_rtol(separation):
    """``relu(x) + 0.2·step(x) + 0.1·tanh(x)`` written with ``np.asarray`` (opaque to the tracer, φ' a central
    difference): the change of its pair over the covariance's bound, by the angle's rule, takes the sup of φ's slope
    off its kinks — on the grid point x = 0 the central difference is the jump over 2h, which made that bound 1e5–1e10
    times the change (refused at 5e-5 relative, 1e-2 apart, depth 2 and 3) once the change along the axes was kept
    for entries where the angle's rule has no bound. The NNGP's bounds cover its error against nested quadrature
    and meet rtol."""
    fn = lambda x: np.maximum(x, 0.0) + 0.2 * (np.asarray(x) > 0.0) + 0.1 * np.tanh(x)  # noqa: E731
    deriv = lambda x: (np.asarray(x) > 0.0) + 0.1 / np.cosh(x) ** 2  # noqa: E731
    rng = np.random.default_rng(5)
    x0 = rng.standard_normal(4)
    X = np.stack([x0, x0 + separation * rng.standard_normal(4)])
    K, _ = references.piecewise_mlp_kernels(fn, deriv, (0.0,), X, depth=3, sigma_w=1.5, sigma_b=0.3)
    got, err = netsor.limit(netsor.zoo.mlp(3, fn, 1.5, 0.3), X).nngp(with_error=True)
    assert np.all(np.abs(got - K) <= err)
    assert np.max(err / np.sqrt(np.outer(np.diag(K), np.diag(K)))) < 1e-8


_A = np.asarray
#: Opaque activations (the tracer cannot see through ``np.asarray``) and their traced twins.
_OPAQUE_TWINS = {
    "tanh": (lambda x: np.tanh(_A(x)), np.tanh),
    "relu + 0.2 step + 0.1 tanh": (lambda x: np.maximum(x, 0.0) + 0.2 * (_A(x) > 0.0) + 0.1 * np.tanh(x),
                                   lambda x: np.maximum(x, 0.0) + 0.2 * np.where(x > 0.0, 1.0, 0.0) + 0.1 * np.tanh(x)),
    "jumps at −0.5, 1.1, kink at 0.2": (
        lambda x: (_A(x) > -0.5) * 1.0 - 0.7 * (_A(x) > 1.1) + np.maximum(x, 0.2),
        lambda x: np.where(x > -0.5, 1.0, 0.0) - 0.7 * np.where(x > 1.1, 1.0, 0.0) + np.maximum(x, 0.2)),
    "step(5x − 1)·sin x": (lambda x: (_A(5 * x) > 1) * np.sin(x), lambda x: np.where(5 * x > 1, np.sin(x), 0.0)),
}


@pytest.mark.parametrize("name", list(_OPAQUE_TWINS))
def test_the_ntk_of_an_opaque_activation_without_a_derivative_is_its_traced_twins(name):
    """φ' of an opaque φ is a central difference. Its rounding (~1e-10 of φ') failed the kink locator's test on
    every panel: the NTK of an opaque tanh was refused. At a jump of φ it is a spike of height jump/2h: the NTK was
    2.5e8 within a bound of 203, then refused where the locator saw the spike, and 1e-7 off within a bound of
    2e-9 where it did not (jumps at −0.5 and 1.1); at a kink located 2e-9 off, φ' jumped there, 1e-9 off. The
    difference is now read beside φ's kinks and jumps (placed where the lines on either side meet): NNGP and NTK
    equal the traced twin's within the two bounds, at the default rtol."""
    opaque, traced = _OPAQUE_TWINS[name]
    X = np.random.default_rng(1).standard_normal((4, 3))
    a = netsor.kernel(netsor.zoo.mlp(2, opaque, 1.3, 0.2), X)
    b = netsor.kernel(netsor.zoo.mlp(2, traced, 1.3, 0.2), X)
    for kind in ("nngp", "ntk"):
        gap = np.abs(getattr(a, kind) - getattr(b, kind))
        assert np.all(gap <= getattr(a, kind + "_error") + getattr(b, kind + "_error")), (kind, np.max(gap))


def test_the_ntk_of_an_opaque_activation_with_declared_kinks_reads_its_difference_beside_them():
    """Declared kinks made φ' of an opaque φ with a jump skip the locator: its spike at the jump was taken as φ'
    and the NTK refused with a bound 92 times the kernel. Given its derivative instead, the same NTK."""
    fn = _OPAQUE_TWINS["relu + 0.2 step + 0.1 tanh"][0]
    deriv = lambda x: (_A(x) > 0.0) + 0.1 / np.cosh(x) ** 2  # noqa: E731
    X = np.random.default_rng(0).standard_normal((3, 4))
    declared = netsor.kernel(netsor.zoo.mlp(2, netsor.activation(fn, kinks=(0.0,)), 1.5, 0.3), X)
    given = netsor.kernel(netsor.zoo.mlp(2, netsor.activation(fn, deriv=deriv, continuous=False), 1.5, 0.3), X)
    assert np.all(np.abs(declared.ntk - given.ntk) <= declared.ntk_error + given.ntk_error)


def test_an_opaque_activation_whose_derivative_has_a_narrow_bump_has_the_ntk_of_its_traced_twin():
    """``where(x > 0.6, 0.5, x) + max(x, 0.56)`` (a random activation written with numpy): its derivative is 2 on
    (0.56, 0.6) and 1 elsewhere. Given opaque with that derivative, the locator's nodes (64 first panels, spacing
    ~0.1 at this scale) missed the bump and the NTK was refused at 0.5 % of the scale; traced, it has exact kinks.
    Both now meet the default rtol and agree within their bounds."""
    X = np.random.default_rng(26).standard_normal((3, 4)) * 1.7
    fn = lambda x: np.where(np.asarray(x, float) > 0.6, 0.5, x) + np.maximum(np.asarray(x, float), 0.56)  # noqa: E731
    deriv = lambda x: 1.0 + ((np.asarray(x, float) > 0.56) & (np.asarray(x, float) < 0.6))  # noqa: E731
    opaque = netsor.kernel(netsor.zoo.mlp(2, netsor.activation(fn, deriv=deriv, name="bumpy")), X)
    traced = netsor.kernel(netsor.zoo.mlp(2, lambda x: np.where(x > 0.6, 0.5, x) + np.maximum(x, 0.56)), X)
    for a, ea, b, eb in ((opaque.nngp, opaque.nngp_error, traced.nngp, traced.nngp_error),
                         (opaque.ntk, opaque.ntk_error, traced.ntk, traced.ntk_error)):
        assert np.all(np.abs(a - b) <= ea + eb)


@pytest.mark.parametrize(("nested", "flat"), [
    (lambda x: np.clip(np.clip(np.abs(x - 0.37), -0.63, 0.5), -0.52, 0.5), lambda x: np.minimum(np.abs(x - 0.37), 0.5)),
    (lambda x: np.clip(np.clip(x, -0.87, 0.5), -1.01, 0.5) * x, lambda x: np.clip(x, -0.87, 0.5) * x),
])
def test_nested_clips_have_the_kernels_of_the_function_written_once(nested, flat):
    """The outer clip of ``clip(clip(·))`` has an argument that is constant on a half-line, where the step in its
    derivative flickered with the rounding: the NTK was refused with bounds of 1e19 … 5e38 (random numpy
    activations). Read as exact pieces, NNGP and NTK meet the default rtol and equal those of the same function
    written with one clip (or min), within the two bounds."""
    X = np.random.default_rng(9).standard_normal((4, 3)) * 1.3
    a, b = (netsor.kernel(netsor.zoo.mlp(2, fn, sigma_b=0.2), X) for fn in (nested, flat))
    for got, e1, ref, e2 in ((a.nngp, a.nngp_error, b.nngp, b.nngp_error), (a.ntk, a.ntk_error, b.ntk, b.ntk_error)):
        assert np.all(np.abs(got - ref) <= e1 + e2)


@pytest.mark.parametrize(("fn", "name", "options"), [
    (np.tanh, "tanh", {"smooth": True}), (np.sin, "sin", {"smooth": True}), (special.erf, "erf", {"smooth": True}),
    (lambda x: np.maximum(x, 0.0), "relu", {"kinks": (0.0,)})])
def test_the_ntk_of_an_opaque_activation_by_central_differences_is_within_its_bound(fn, name, options):
    """A custom φ given without ``deriv`` (opaque: it converts its argument to an array, so nothing traces it) has
    φ' by central differences, off by ~1e-10 of φ' (rounding over the step): its NTK was within the default rtol
    but up to 39× (sin) and 53× (relu, kink declared) beyond its reported bound. The difference's own error
    (``central_difference_error``) is now counted: NTKs of 3 input sets equal the registered φ's within the two
    bounds, at the default rtol."""
    op = netsor.activation(lambda x: fn(np.asarray(x, dtype=float)), name=f"opaque {name}", **options)
    for seed in range(3):
        X = np.random.default_rng(seed).standard_normal((4, 3)) * 1.5
        got = netsor.kernel(netsor.zoo.mlp(2, op, sigma_b=0.2), X)
        ref = netsor.kernel(netsor.zoo.mlp(2, name, sigma_b=0.2), X)
        assert np.all(np.abs(got.ntk - ref.ntk) <= got.ntk_error + ref.ntk_error)
        assert np.all(np.abs(got.nngp - ref.nngp) <= got.nngp_error + ref.nngp_error)


@pytest.mark.parametrize("name", ["identity", "tanh", "erf"])
def test_a_users_continuous_derivative_keeps_nearly_parallel_ntk_pairs_lipschitz(name):
    """An opaque φ with its derivative given (``deriv``): nobody declared φ' continuous, so pairs of φ' were
    ½-Hölder at nearly parallel inputs — the NTK of an opaque identity (φ' = 1) at inputs 1e-6 apart was refused
    with a bound of 4.7 of the kernel (random numpy activations at nearly parallel inputs). Where the locator finds
    no jump in φ' it is continuous: the NTK meets the default rtol and equals the registered φ's within bounds."""
    fn, deriv = {"identity": (lambda x: x, np.ones_like), "tanh": (np.tanh, lambda x: 1.0 - np.tanh(x) ** 2),
                 "erf": (special.erf, lambda x: 2.0 / np.sqrt(np.pi) * np.exp(-x * x))}[name]
    opaque = netsor.activation(lambda x: fn(np.asarray(x, dtype=float)), name=f"opaque {name}",
                               deriv=lambda x: deriv(np.asarray(x, dtype=float)))
    X = np.random.default_rng(40132).standard_normal((3, 4)) * 1.6
    X[1] = X[0] * (1 + 1e-6)
    got = netsor.kernel(netsor.zoo.mlp(2, opaque), X)
    ref = netsor.kernel(netsor.zoo.mlp(2, name), X)
    assert np.all(np.abs(got.ntk - ref.ntk) <= got.ntk_error + ref.ntk_error)


def test_the_ntk_of_an_untraceable_function_without_a_derivative_is_that_of_the_traced_function():
    """A callable the tracer cannot see through (it converts its argument to an array) stays opaque, as a zoo
    activation or as a program's NonLin (``∂fn`` by central differences of relative step); its NTK was refused
    ("cannot locate the kinks": the differences' rounding showed on every panel of the locator). Both now equal
    the NTK of the traced ``np.tanh`` within the two bounds."""
    X = np.random.default_rng(6).standard_normal((3, 3))
    opaque_tanh = lambda x: np.tanh(np.asarray(x, dtype=float))  # noqa: E731

    def single_nonlin(fn):
        p = netsor.Program()
        g = p.input(p.dim("n"))
        p.readout(netsor.nonlin(fn, g))
        return p

    for opaque, traced in ((netsor.zoo.mlp(2, opaque_tanh), netsor.zoo.mlp(2, np.tanh)),
                           (single_nonlin(opaque_tanh), single_nonlin(np.tanh))):
        a, b = netsor.kernel(opaque, X), netsor.kernel(traced, X)
        assert np.all(np.abs(a.ntk - b.ntk) <= a.ntk_error + b.ntk_error)
        assert np.all(np.abs(a.nngp - b.nngp) <= a.nngp_error + b.nngp_error)


def _floor_pair_by_quadrature(a, b, c):
    """``E[floor(u) floor(v)]`` for ``(u, v)`` centred Gaussian with variances ``a, b`` and covariance ``c``: over each
    cell ``floor(u) = i`` the conditional mean ``E[floor(v) | u] = Σ_{j ≥ 1} Φ((μ − j)/s) − Σ_{j ≤ 0} Φ((j − μ)/s)``
    (``μ = c u/a``, ``s² = b − c²/a``), integrated by adaptive quadrature (scipy)."""
    from scipy import integrate, stats
    sa, s = np.sqrt(a), np.sqrt(max(b - c * c / a, 0.0))
    reach = int(np.ceil(12 * max(sa, np.sqrt(b)))) + 1
    js = np.arange(-reach, reach + 1)

    def conditional(u):
        mu = c * u / a
        if s == 0.0:
            return np.floor(mu)
        return np.sum(stats.norm.cdf((mu - js[js >= 1]) / s)) - np.sum(stats.norm.cdf((js[js <= 0] - mu) / s))

    total = 0.0
    for i in range(-reach, reach):
        if i == 0:
            continue
        part, _ = integrate.quad(lambda u: conditional(u) * stats.norm.pdf(u / sa) / sa, i, i + 1,
                                 epsabs=1e-14, epsrel=1e-13)
        total += i * part
    return total


@pytest.mark.parametrize("depth", [1, 2])
def test_a_function_with_a_jump_at_every_integer_has_an_ntk_equal_to_its_nngp(depth):
    """``np.floor`` (opaque: its jumps located, ~20 within the Gaussian's reach) has φ' = 0 almost everywhere, so an
    MLP of it has an NTK equal to its NNGP (only the readout is trained in effect). Before, every NTK entry was
    refused at twice its value: the pair rule's bound is infinite at ρ = 1, an entry that takes per-point values,
    and it stood for the whole tile. At depth 1 the NNGP ``σ_w² E[floor(u) floor(v)] + σ_b²`` equals an adaptive
    quadrature over the integer cells within the bounds (plus the reference's 1e-11)."""
    X = np.random.default_rng(0).standard_normal((4, 3))
    sigma_w, sigma_b = 1.0, 0.1
    k = netsor.kernel(netsor.zoo.mlp(depth, np.floor, sigma_w, sigma_b), X)
    assert np.all(np.abs(k.ntk - k.nngp) <= k.ntk_error + k.nngp_error)
    scale = np.sqrt(np.outer(np.diag(k.nngp), np.diag(k.nngp)))
    assert np.all(k.ntk_error <= 1e-8 * scale) and np.all(k.nngp_error <= 1e-8 * scale)
    if depth == 1:
        G = sigma_w**2 * X @ X.T / X.shape[1] + sigma_b**2
        ref = np.array([[sigma_w**2 * _floor_pair_by_quadrature(G[i, i], G[j, j], G[i, j]) + sigma_b**2
                         for j in range(4)] for i in range(4)])
        assert np.all(np.abs(k.nngp - ref) <= k.nngp_error + 1e-11 * scale)


@pytest.mark.parametrize(("fn", "exponent"), [(lambda x: np.sqrt(np.maximum(x, 0.0)), "-0.5"),
                                              (lambda x: np.sign(x) * np.sqrt(np.abs(x)), "-0.5"),
                                              (lambda x: np.abs(x) ** 0.4, "-0.6")])
def test_an_infinite_ntk_is_refused_where_quadrature_would_report_a_finite_one(fn, exponent):
    """φ = √relu, sign·√|x| (traced: φ' = 1/(2√|x|)) and |x|^0.4 (a non-integer power, opaque: φ' a central
    difference, bounded by its step) have ``E φ'(u)² = ∞``: the NTK of their networks is infinite on its diagonal.
    Before, quadrature reported it finite (√relu at rtol 0.9: 1.28 ± 0.05) or refused with a bound ("pass a larger
    rtol"); now a NumericalError says the expectation is infinite and why. Their NNGP is finite and stays; |x|^0.6
    (φ'² ~ |x|^−0.8, integrable) keeps its NTK."""
    X = np.random.default_rng(0).standard_normal((4, 3))
    program = netsor.zoo.mlp(2, fn, 1.0, 0.1)
    with pytest.raises(netsor.NumericalError, match=f"is infinite: .* grows like .*\\^{exponent}"):
        netsor.kernel(program, X, rtol=0.9)
    assert np.all(np.isfinite(netsor.kernel(program, X, rtol=0.9, get=("nngp",)).nngp))
    k = netsor.kernel(netsor.zoo.mlp(1, lambda x: np.abs(x) ** 0.6, 1.0, 0.1), X, rtol=0.5)
    assert np.all(np.isfinite(k.ntk)) and np.all(np.isfinite(k.ntk_error))
