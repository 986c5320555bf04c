"""The NTK by the tangent program (forward-mode differentiation as a program transform): against
the backward program (gradient independence, exact transposes), parity, and the transform itself."""

import numpy as np
import pytest

import netsor
from netsor.errors import ProgramError
from netsor.interpret.parity import EVEN, ODD, vector_parities
from netsor.ir.tangent import tangent_program
from netsor.ir.transforms import clone

ZOO = {
    "mlp-relu": (lambda: netsor.zoo.mlp(3, "relu", 1.4, 0.3), (5, 4)),
    "mlp-erf": (lambda: netsor.zoo.mlp(3, "erf", 1.2, 0.1), (5, 4)),
    "mlp-gelu": (lambda: netsor.zoo.mlp(2, "gelu", 1.0, 0.2), (4, 3)),
    "resnet": (lambda: netsor.zoo.resnet(2, "relu"), (4, 3)),
    "rnn": (lambda: netsor.zoo.rnn(5), (3, 5, 2)),
    "cnn": (lambda: netsor.zoo.cnn(2, "relu", filter_size=3, length=4), (2, 4, 2)),
    "layernorm": (lambda: netsor.zoo.layernorm_mlp(2, "relu"), (4, 3)),
    "transformer": (lambda: netsor.zoo.transformer(1, tokens=3), (2, 3, 2)),
    "gru": (lambda: netsor.zoo.gru(2), (2, 2, 2)),
}


@pytest.mark.parametrize("name", ZOO)
def test_tangent_ntk_equals_the_backward_pass_with_gradient_independence(name):
    """Without transposes gradient independence is exact, so the backward program's NTK and the
    tangent program's (the default) (which assumes nothing) are the same number: they agree within the sum of
    their bounds, on the data and across input sets."""
    build, shape = ZOO[name]
    p = build()
    rtol = 1e-4 if name == "gru" else 1e-6  # the GRU's gate orthants: Genz's rule with its standard error
    X = np.random.default_rng(1).standard_normal(shape)
    X2 = np.random.default_rng(2).standard_normal((2, *shape[1:]))
    for args in ((X,),) if name == "gru" else ((X,), (X, X2)):
        forward = netsor.kernel(p, *args, get="ntk", rtol=rtol)
        backward = netsor.kernel(p, *args, get="ntk", rtol=rtol, backward="independent")
        scale = np.max(np.abs(backward.ntk))
        assert np.all(np.abs(forward.ntk - backward.ntk) <= forward.ntk_error + backward.ntk_error
                      + 1e-14 * scale), name


def transposed(sigma=1.3, act=netsor.tanh):
    """``y = vᵀ Wᵀ φ(W g)/√n``: the backward ``Wᵀ`` is correlated with the forward one."""
    p = netsor.Program()
    n = p.dim("n")
    W = p.matrix(n, n, sigma)
    p.readout(W.T @ act(W @ p.input(n, bias=0.2)))
    return p


@pytest.mark.parametrize("act", [netsor.tanh, netsor.relu, netsor.erf])
def test_tangent_ntk_equals_the_backward_pass_with_exact_transposes(act):
    """With transposes the tangent program is differentiated as it is: its NTK is the exact
    (Netsor⊤) backward program's, and not gradient independence's."""
    p = transposed(act=act)
    X = np.random.default_rng(3).standard_normal((4, 3))
    forward = netsor.kernel(p, X, get="ntk", rtol=1e-7)
    exact = netsor.kernel(p, X, get="ntk", rtol=1e-7, backward="exact")
    independent = netsor.kernel(p, X, get="ntk", rtol=1e-7, backward="independent")
    assert np.all(np.abs(forward.ntk - exact.ntk) <= forward.ntk_error + exact.ntk_error + 1e-14)
    assert np.max(np.abs(forward.ntk - independent.ntk)) > 0.05 * np.max(forward.ntk)


def test_the_ntk_is_the_nngp_of_the_tangent_program():
    """The tangent program's readouts are the NTK's: its NNGP kernel is the original's NTK (a
    readout of ``h`` and ``ḣ`` with ``σ_v√2``), and the readout bias enters once."""
    p = netsor.Program()
    n = p.dim("n")
    g = p.input(n, sigma=1.1, bias=0.3)
    h = netsor.relu(g) * netsor.erf(p.matrix(n, n, 0.9) @ netsor.tanh(g))
    p.readout(h, netsor.relu(g), sigma=1.2, bias=0.4)
    X = np.random.default_rng(4).standard_normal((5, 3))
    tangents = tangent_program(p)
    assert len(tangents.outputs) == p.num_outputs == tangents.program.num_outputs
    K, E = netsor.limit(tangents.program, X).nngp(with_error=True)
    k = netsor.kernel(p, X, get="ntk")
    assert np.all(np.abs(K - k.ntk) <= E + k.ntk_error)


def test_forward_vectors_are_even_and_tangents_odd():
    """Parity under the tangent direction's sign flip: every vector of the original is even, every
    tangent odd; a product of two tangents has none that is certain here (it is even, but this
    analysis only proves what it needs), and a sum of an even and an odd vector has none."""
    p = netsor.zoo.mlp(2, "tanh", 1.0, 0.5)
    tangents = tangent_program(p)
    parity = vector_parities(tangents.program)
    originals = {tangents.renaming[v] for v in tangents.tangents}
    assert originals and all(parity[v] == EVEN for v in originals)
    assert all(parity[t] == ODD for t in tangents.tangents.values())
    q = tangents.program
    some_even, some_odd = next(iter(originals)), next(iter(tangents.tangents.values()))
    assert vector_parities(q)[some_odd] == ODD
    mixed = some_even + some_odd if some_even.kind == some_odd.kind == "G" else None
    if mixed is not None:
        assert vector_parities(q)[mixed] == 0


def test_second_moments_of_even_and_odd_vectors_are_exactly_zero():
    """``E[Z^h Z^ḣ] = 0`` exactly (no quadrature: the sources are independent by parity), and
    ``E[(Z^ḣ)²]`` is the product of independent factors ``E[tanh'(g)²] E[ġ²]`` (against 200-node
    Gauss–Hermite: tanh'² is entire, so the rule is exact to rounding)."""
    p = netsor.Program()
    n = p.dim("n")
    g = p.input(n, sigma=1.3)
    h = netsor.tanh(g)
    p.readout(h)
    t = tangent_program(p)
    X = np.random.default_rng(5).standard_normal((3, 2))
    lim = netsor.limit(t.program, X)
    dh, dg = t.tangents[h], t.tangents[g]
    assert np.all(lim.cov(t.renaming[h], dh) == 0.0)
    var_g = 1.3**2 * np.sum(X * X, axis=1) / 2
    assert np.allclose(np.diag(lim.cov(dg, dg)), var_g, rtol=1e-14)
    z, w = np.polynomial.hermite_e.hermegauss(200)
    dphi2 = np.array([w @ (1 - np.tanh(np.sqrt(v) * z) ** 2) ** 2 / np.sqrt(2 * np.pi) for v in var_g])
    assert np.allclose(np.diag(lim.cov(dh, dh)), dphi2 * var_g, rtol=1e-12)


def test_odd_declarations_are_checked_and_survive_a_clone():
    """Only matrices and biases can be declared odd; a clone keeps the declaration; parities
    multiply through MatMuls and odd activations (an odd ``W`` times ``tanh`` of an odd ``b`` is
    even), and a kinked even-less function of an odd vector has none."""
    p = netsor.Program()
    n = p.dim("n")
    b, c = p.bias(n, 1.0), p.bias(n, 1.0)
    W = p.matrix(n, n)
    both = W @ netsor.tanh(b)
    one = W @ netsor.tanh(c)
    neither = W @ netsor.relu(b)
    with pytest.raises(ProgramError, match="only matrices and those"):
        p.mark_odd(one)
    with pytest.raises(ProgramError, match="another program"):
        netsor.Program().mark_odd(W)
    version = p.version
    p.mark_odd(W, b)
    assert p.version != version  # analyses derived before the declaration are stale
    copy, ren = clone(p)
    assert set(copy.odd_sources) == {ren.matrices[W], ren[b]}
    parity = vector_parities(copy)
    assert (parity[ren[both]], parity[ren[one]], parity[ren[neither]]) == (EVEN, ODD, 0)


def test_a_tangent_that_vanishes_is_a_zero_vector_at_finite_width_too():
    """``step(g)`` is constant in the parameters almost everywhere: its tangent is an empty sum, the
    zero vector, which the finite samplers and the coupled run hold as zeros of the right shape (it was
    a bare 0.0 that the readout could not contract: tangent campaign seed 303), and the NTK of
    ``vᵀ step(g)/√n`` is its NNGP (only the readout is trained)."""
    p = netsor.Program()
    n = p.dim("n")
    p.readout(netsor.step(p.input(n)), sigma=1.3)
    t = tangent_program(p).program
    X = np.random.default_rng(6).standard_normal((3, 4))
    assert netsor.sample(t, X, width=16, samples=2).shape == (2, 3)
    k = netsor.kernel(p, X)
    np.testing.assert_allclose(k.ntk, k.nngp, rtol=1e-14, atol=0.0)
    assert netsor.empirical_ntk(p, X, width=16, samples=2, seed=0).shape == (2, 3, 3)
